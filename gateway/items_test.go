package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// The reference router's load-balancing integration tests as hermetic tests (virtual time,
// in-memory listeners, fake pylons that report a fixed load on every response).

func servedBy(t *testing.T, h *harness, n int, headers map[string]string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := range n {
		r := h.chat(headers)
		if r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
		got[r.headers["X-Inference-Server-Id"]]++
	}
	return got
}

// Power-of-n (no config) routes all 20 probes to the backend with 0 vs 1000 queued tokens
// (tps 1000 each).
func TestHermeticPowerOfNQueuedTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		h.register(h.pylon("busy", "busy", load.Load{InputTPS: 1000, QueuedInputTokens: 1000}, nil))
		h.register(h.pylon("idle", "idle", load.Load{InputTPS: 1000}, nil))
		if got := servedBy(t, h, 20, map[string]string{"x-input-tokens": "10"}); got["idle"] != 20 {
			t.Errorf("served by %v, want 20 × idle", got)
		}
	})
}

// Input-work admission → 503 overloaded_error (input_work_limit_exceeded with
// --legacy-input-work-error-code); unknown model → 404; registered-but-INACTIVE → 503
// without that code; after deregistration → 404 again.
func TestHermeticInputWorkAdmission(t *testing.T) {
	const cfg = `{"default":"power-of-n","models":{"m":{"algorithm":"power-of-n","max_input_work_seconds":0.5}}}`
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{LegacyInputWorkErrorCode: true}, cfg)
		h.register(h.pylon("p", "p", load.Load{InputTPS: 100, QueuedInputTokens: 100}, nil))
		r := h.chat(map[string]string{"x-input-tokens": "50"})
		if r.status != 503 || r.headers["X-Stargate-Error-Code"] != "input_work_limit_exceeded" || !strings.Contains(r.body, `"code":"input_work_limit_exceeded"`) {
			t.Errorf("legacy code, 1.5 s of work over 0.5 s: %d %v %s", r.status, r.headers["X-Stargate-Error-Code"], r.body)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, cfg)
		h.register(h.pylon("p", "p", load.Load{InputTPS: 100, QueuedInputTokens: 100}, nil))
		r := h.chat(map[string]string{"x-input-tokens": "50"})
		if r.status != 503 || r.headers["X-Stargate-Error-Code"] != "overloaded_error" || !strings.Contains(r.body, `"code":"overloaded_error"`) || r.headers["Retry-After"] != "1" {
			t.Errorf("1.5 s of work over 0.5 s: %d %v %s", r.status, r.headers, r.body)
		}
		if r := h.chat(map[string]string{"x-model": "unknown", "x-input-tokens": "1"}); r.status != 404 || r.headers["X-Stargate-Error-Code"] != "no_eligible_candidates" {
			t.Errorf("unknown model: %d %v", r.status, r.headers)
		}
		inactive := `{"inference_server_id":"q","inference_server_url":"http://q:80","models":{"n":{"status":"INACTIVE","stats":{"last_mean_input_tps":100}}}}`
		if r := h.do("PUT", wire.RegistrationPath+"q", []byte(inactive), nil); r.status != 200 {
			t.Fatal(r.body)
		}
		synctest.Wait()
		r = h.chat(map[string]string{"x-model": "n", "x-input-tokens": "1"})
		if r.status != 503 || r.headers["X-Stargate-Error-Code"] == "no_eligible_candidates" {
			t.Errorf("registered but INACTIVE: %d %v", r.status, r.headers)
		}
		if r := h.do("DELETE", wire.RegistrationPath+"q", nil, nil); r.status != 204 {
			t.Fatal(r.status)
		}
		synctest.Wait()
		if r := h.chat(map[string]string{"x-model": "n", "x-input-tokens": "1"}); r.status != 404 {
			t.Errorf("after deregistration: %d", r.status)
		}
	})
}

// Random ({"default":"random"}) hits all 3 backends within 30 requests.
func TestHermeticRandom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"random"}`)
		for _, id := range []string{"a", "b", "c"} {
			h.register(h.pylon(id, id, idleLoad(), nil))
		}
		if got := servedBy(t, h, 30, nil); len(got) != 3 {
			t.Errorf("30 random requests hit %v", got)
		}
	})
}

// Cluster aggregation: a shared cluster 2×(tps 100, queued 130) = 1.3 s loses to a single
// cluster at 1.2 s; once it drains, requests go to the shared cluster and both of its
// backends are used.
func TestHermeticClusterAggregation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		s1 := h.pylon("s1", "shared", load.Load{InputTPS: 100, QueuedInputTokens: 130}, nil)
		s2 := h.pylon("s2", "shared", load.Load{InputTPS: 100, QueuedInputTokens: 130}, nil)
		single := h.pylon("single", "single", load.Load{InputTPS: 100, QueuedInputTokens: 120}, nil)
		for _, p := range []*fakePylon{s1, s2, single} {
			h.register(p)
		}
		if got := servedBy(t, h, 10, map[string]string{"x-input-tokens": "1"}); got["single"] != 10 {
			t.Errorf("1.3 s vs 1.2 s: %v", got)
		}
		for _, p := range []*fakePylon{s1, s2} {
			p.mu.Lock()
			p.load.QueuedInputTokens = 0
			p.mu.Unlock()
			h.register(p)
		}
		got := servedBy(t, h, 10, map[string]string{"x-input-tokens": "1"})
		if got["s1"] == 0 || got["s2"] == 0 || got["single"] != 0 {
			t.Errorf("drained shared cluster: %v, want both s1 and s2 only", got)
		}
	})
}

// Wait-and-widen prefers the backend with tps 200 over tps 10 (10 tokens).
func TestHermeticWAWPrefersThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"wait-and-widen"}`)
		h.register(h.pylon("slow", "slow", load.Load{InputTPS: 10}, nil))
		h.register(h.pylon("fast", "fast", load.Load{InputTPS: 200}, nil))
		if got := servedBy(t, h, 10, map[string]string{"x-input-tokens": "10"}); got["fast"] != 10 {
			t.Errorf("served by %v", got)
		}
	})
}

// With x-max-wait-ms 250, wait-and-widen waits for the slower available backend when the
// fastest is full, and always chooses the available one.
func TestHermeticWaitForAvailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"wait-and-widen"}`)
		h.register(h.pylon("full", "full", load.Load{InputTPS: 20_000, RunningRequests: 4, MaxEngineConcurrency: 4}, nil))
		h.register(h.pylon("free", "free", load.Load{InputTPS: 5000, MaxEngineConcurrency: 4}, nil))
		if got := servedBy(t, h, 5, map[string]string{"x-input-tokens": "400", "x-max-wait-ms": "250"}); got["free"] != 5 {
			t.Errorf("served by %v", got)
		}
	})
}

// Comparator queue-time, n 2: x-priority 4 picks the backend with the lower priority-4
// estimate (5 vs 500 ms); without the header the lower priority-0 estimate.
func TestHermeticPriorityEstimates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"wait-and-widen","models":{"m":{"algorithm":"wait-and-widen","comparator":"queue-time","n":2,"ttft_bucket_size_ms":100000}}}`)
		a := load.Load{InputTPS: 1000, QueueEstimates: []load.PriorityEstimate{{Priority: 0, QueueMs: 5}, {Priority: 4, QueueMs: 500}}}
		b := load.Load{InputTPS: 1000, QueueEstimates: []load.PriorityEstimate{{Priority: 0, QueueMs: 50}, {Priority: 4, QueueMs: 5}}}
		h.register(h.pylon("a", "a", a, nil))
		h.register(h.pylon("b", "b", b, nil))
		if got := servedBy(t, h, 5, map[string]string{"x-input-tokens": "1", "x-priority": "4"}); got["b"] != 5 {
			t.Errorf("priority 4: %v", got)
		}
		if got := servedBy(t, h, 5, map[string]string{"x-input-tokens": "1"}); got["a"] != 5 {
			t.Errorf("priority 0: %v", got)
		}
	})
}

// Pulsar: the same key stabilises on one backend, 20/20.
func TestHermeticPulsarStability(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"pulsar"}`)
		for _, id := range []string{"a", "b", "c"} {
			h.register(h.pylon(id, id, idleLoad(), nil))
		}
		if got := servedBy(t, h, 20, map[string]string{"x-cache-affinity-key": "prefix-1"}); len(got) != 1 {
			t.Errorf("pulsar spread one key over %v", got)
		}
	})
}

// An x-routing-method override keeps its state per routing key: round-robin selected by
// the header runs one sequence for tenant-a and another for tenant-b, and neither moves
// the other's.
func TestHermeticOverrideIsolatedPerRoutingKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"power-of-n","request_algorithms":{"round-robin":"round-robin"}}`)
		for _, key := range []string{"tenant-a", "tenant-b"} {
			for _, c := range []string{"c0", "c1", "c2"} {
				p := h.pylon(key+"-"+c, c, idleLoad(), nil)
				reg := wire.Registration{
					ID: p.id, URL: "http://" + p.addr, ClusterID: c, RoutingKey: key, HeartbeatMs: 60_000,
					Models: map[string]wire.Model{"m": {Status: wire.StatusActive, Generation: 1, Stats: wire.StatsFromLoad(&p.load)}},
				}
				body, _ := json.Marshal(reg)
				if r := h.do("PUT", wire.RegistrationPath+p.id, body, nil); r.status != 200 {
					t.Fatalf("register %s: %d %s", p.id, r.status, r.body)
				}
				synctest.Wait()
			}
		}
		next := func(key string) string {
			t.Helper()
			r := h.chat(map[string]string{"x-routing-method": "round_robin", "x-routing-key": key, "x-input-tokens": "1"})
			if r.status != 200 {
				t.Fatalf("%s: %d %s", key, r.status, r.body)
			}
			return strings.TrimPrefix(r.headers["X-Inference-Server-Id"], key+"-")
		}
		got := []string{next("tenant-a"), next("tenant-a"), next("tenant-b"), next("tenant-a"), next("tenant-b"), next("tenant-b")}
		want := []string{"c0", "c1", "c0", "c2", "c1", "c2"}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("sequence %v, want %v (one sequence per routing key)", got, want)
			}
		}
	})
}

// A single full backend under wait-and-widen: 503 with x-stargate-error-code and body code
// overloaded_error, counted once in admission_rejections_total{reason=
// "routing_capacity_unavailable"}; an input-work admission rejection is counted under its
// own reason.
func TestHermeticCapacityRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"wait-and-widen","models":{"m":{"algorithm":"wait-and-widen","max_input_work_seconds":0.5}}}`)
		full := idleLoad()
		full.RunningRequests = full.MaxEngineConcurrency
		p := h.pylon("p", "p", full, nil)
		h.register(p)
		r := h.chat(map[string]string{"x-input-tokens": "1"})
		if r.status != 503 || r.headers["X-Stargate-Error-Code"] != "overloaded_error" {
			t.Errorf("full backend: %d %q, want 503 overloaded_error", r.status, r.headers["X-Stargate-Error-Code"])
		}
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(r.body), &body); err != nil || body.Error.Code != "overloaded_error" {
			t.Errorf("body %s (%v), want error.code overloaded_error", r.body, err)
		}
		if v := h.scrapeMetric(`switchyard_admission_rejections_total{routing_key="",model="m",reason="routing_capacity_unavailable"}`); v != "1" {
			t.Errorf("admission rejections (capacity) %q, want 1", v)
		}

		p.mu.Lock()
		p.load = load.Load{InputTPS: 100, QueuedInputTokens: 100, MaxEngineConcurrency: 8}
		p.mu.Unlock()
		h.register(p)
		r = h.chat(map[string]string{"x-input-tokens": "50"})
		if r.status != 503 {
			t.Errorf("1.5 s of input work over 0.5 s: %d %s, want 503", r.status, r.body)
		}
		if v := h.scrapeMetric(`switchyard_admission_rejections_total{routing_key="",model="m",reason="input_work_limit_exceeded"}`); v != "1" {
			t.Errorf("admission rejections (input work) %q, want 1", v)
		}
		if v := h.scrapeMetric(`switchyard_admission_rejections_total{routing_key="",model="m",reason="routing_capacity_unavailable"}`); v != "1" {
			t.Errorf("admission rejections (capacity) %q after the input-work rejection, want still 1", v)
		}
	})
}

package gateway_test

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway"
)

// With capacity_wait_ms a request that finds its only backend full waits for a slot: it is
// served as soon as the backend reports one free, and shed with 503 overloaded_error and a
// Retry-After once the wait is over. Without the setting it is shed at once.
func TestCapacityWaitKeepsTheFleetBusy(t *testing.T) {
	full := idleLoad()
	full.RunningRequests = full.MaxEngineConcurrency
	start := func(t *testing.T, cfg string) (*harness, *fakePylon) {
		t.Helper()
		h := newHarness(t, gateway.Config{}, cfg)
		p := h.pylon("p1", "c1", full, nil)
		h.register(p)
		return h, p
	}
	synctest.Test(t, func(t *testing.T) {
		h, p := start(t, `{"default":"wait-and-widen","models":{"m":{"algorithm":"wait-and-widen","capacity_wait_ms":500}}}`)
		began := time.Now()
		r := h.chat(nil)
		if r.status != 503 || r.headers["X-Stargate-Error-Code"] != "overloaded_error" || r.headers["Retry-After"] != "1" {
			t.Errorf("shed: %d %v %s, want 503 overloaded_error with Retry-After 1", r.status, r.headers, r.body)
		}
		if waited := time.Since(began); waited != 500*time.Millisecond {
			t.Errorf("shed after %v, want the 500 ms capacity wait", waited)
		}
		if v := h.scrapeMetric(`switchyard_admission_rejections_total{routing_key="",model="m",reason="routing_capacity_unavailable"}`); v != "1" {
			t.Errorf("admission rejections %q, want 1", v)
		}

		done := make(chan response)
		go func() { done <- h.chat(nil) }()
		time.Sleep(200 * time.Millisecond)
		p.mu.Lock()
		p.load = idleLoad()
		p.mu.Unlock()
		began = time.Now()
		h.register(p)
		if r := <-done; r.status != 200 {
			t.Errorf("with a slot freed after 200 ms: %d %s, want 200", r.status, r.body)
		}
		if waited := time.Since(began); waited > 0 {
			t.Errorf("served %v after the slot freed, want at once", waited)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h, _ := start(t, `{"default":"wait-and-widen"}`)
		began := time.Now()
		if r := h.chat(nil); r.status != 503 || time.Since(began) != 0 {
			t.Errorf("without capacity_wait_ms: %d after %v, want an immediate 503", r.status, time.Since(began))
		}
	})
}

// prefill_wait: a session's second request that reaches the cluster while the first is
// still being prefilled (no response headers yet) waits for those headers and then goes
// to the same cluster, where the prompt is now cached; with prefill_wait off it is sent at
// once and prefills the prompt a second time.
func TestSecondTurnWaitsForTheFirstPrefill(t *testing.T) {
	run := func(t *testing.T, option string) (sentAt time.Duration, backends map[string]bool) {
		t.Helper()
		h := newHarness(t, gateway.Config{}, `{"default":"power-of-n","models":{"m":{"algorithm":"wait-and-widen",`+
			`"cache_affinity_backend_selection_count":1`+option+`}}}`)
		began := time.Now()
		var mu sync.Mutex
		arrivals := map[int]time.Duration{}
		slow := func(call int, ctx *fasthttp.RequestCtx) {
			mu.Lock()
			arrivals[call] = time.Since(began)
			mu.Unlock()
			if call == 1 {
				time.Sleep(300 * time.Millisecond) // the first prompt's prefill
			}
			ctx.SetBodyString(`{"ok":true}`)
		}
		for _, id := range []string{"p1", "p2"} {
			h.register(h.pylon(id, id, idleLoad(), slow))
		}
		began = time.Now()
		headers := map[string]string{"x-cache-affinity-key": "s", "x-input-tokens": "100"}
		first := make(chan response)
		go func() { first <- h.chat(headers) }()
		time.Sleep(100 * time.Millisecond)
		second := h.chat(headers)
		r1 := <-first
		if r1.status != 200 || second.status != 200 {
			t.Fatalf("statuses %d and %d", r1.status, second.status)
		}
		mu.Lock()
		defer mu.Unlock()
		return arrivals[2], map[string]bool{r1.headers["X-Inference-Server-Id"]: true, second.headers["X-Inference-Server-Id"]: true}
	}
	synctest.Test(t, func(t *testing.T) {
		sent, backends := run(t, "")
		if sent != 300*time.Millisecond || len(backends) != 1 {
			t.Errorf("second request reached its backend at %v on %v, want at 300 ms (the first's headers) on the same backend", sent, backends)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		if sent, _ := run(t, `,"prefill_wait":false`); sent != 100*time.Millisecond {
			t.Errorf("without prefill_wait the second request reached its backend at %v, want at once (100 ms)", sent)
		}
	})
}

// capacity_wait_order: when a slot frees up, the waiting request with the least work (input
// tokens plus max_tokens) takes it under "shortest", the earliest under "arrival"; a
// request that names no output bound counts as the longest.
func TestCapacityWaitOrder(t *testing.T) {
	bodies := map[string]string{
		"long":      `{"model":"m","max_tokens":1000,"messages":[{"role":"user","content":"long"}]}`,
		"unbounded": `{"model":"m","messages":[{"role":"user","content":"unbounded"}]}`,
		"short":     `{"model":"m","messages":[{"role":"user","content":"short"}],"max_completion_tokens" : 10}`,
	}
	served := func(t *testing.T, order string) []string {
		t.Helper()
		h := newHarness(t, gateway.Config{}, `{"default":"wait-and-widen","models":{"m":{"algorithm":"wait-and-widen",`+
			`"capacity_wait_ms":1000,"capacity_wait_order":"`+order+`"}}}`)
		one := load.Load{InputTPS: 1000, MaxEngineConcurrency: 1, RunningRequests: 1}
		var mu sync.Mutex
		var got []string
		p := h.pylon("p1", "c1", one, func(_ int, ctx *fasthttp.RequestCtx) {
			for name, b := range bodies {
				if string(ctx.PostBody()) == b {
					mu.Lock()
					got = append(got, name)
					mu.Unlock()
				}
			}
			time.Sleep(50 * time.Millisecond)
			ctx.SetBodyString(`{"ok":true}`)
		})
		h.register(p)
		var wg sync.WaitGroup
		for _, name := range []string{"long", "unbounded", "short"} { // in order of arrival
			wg.Go(func() {
				if r := h.do("POST", "/v1/chat/completions", []byte(bodies[name]), map[string]string{"x-input-tokens": "100"}); r.status != 200 {
					t.Errorf("%s: %d %s, want 200", name, r.status, r.body)
				}
			})
			time.Sleep(10 * time.Millisecond)
		}
		p.mu.Lock()
		p.load.RunningRequests = 0 // the slot frees up
		p.mu.Unlock()
		h.register(p)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	for order, want := range map[string][]string{
		"shortest": {"short", "long", "unbounded"},
		"arrival":  {"long", "unbounded", "short"},
	} {
		synctest.Test(t, func(t *testing.T) {
			if got := served(t, order); !slices.Equal(got, want) {
				t.Errorf("%s: served %v, want %v", order, got, want)
			}
		})
	}
}

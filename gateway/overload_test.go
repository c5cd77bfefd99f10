package gateway_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

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

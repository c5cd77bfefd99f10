package gateway_test

import (
	"testing"
	"testing/synctest"
	"time"

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

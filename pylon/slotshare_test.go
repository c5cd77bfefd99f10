package pylon_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// A pylon with a slot share of 2 in front of an engine with 2 slots (its sibling idle):
// two requests the gateway expected no queue for take the share, and a third the gateway
// sent without an estimate (its last attempt) is admitted, as every such request is. With
// --engine-slot-share-wait it waits in the pylon until one of the two ends and reaches
// the engine when a slot is free, so the engine never queues it; when the wait runs out
// first, or with no wait, it goes on and the engine queues it. Virtual time: each request
// takes 100 ms to its first token, then 2 tokens 1 s apart.
func TestHermeticSlotShareHold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wait   time.Duration
		queued string // the third request's x-engine-queued
		holds  map[string]float64
	}{
		{"released", 30 * time.Second, "", map[string]float64{"released": 1, "timeout": 0}},
		{"timeout", 500 * time.Millisecond, "true", map[string]float64{"released": 0, "timeout": 1}},
		{"off", 0, "true", map[string]float64{"released": 0, "timeout": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newShareHermetic(t, tc.wait)
				defer h.close()

				const path = "/v1/chat/completions"
				noQueue := map[string]string{wire.HeaderExpectedQueueMs: "0"}
				var wg sync.WaitGroup
				var first, second, last outcome
				wg.Go(func() { first = h.sendWith(path, "first", 100, streamBody, nil, noQueue) })
				wg.Go(func() { second = h.sendWith(path, "second", 100, streamBody, nil, noQueue) })
				time.Sleep(100 * time.Millisecond)
				wg.Go(func() { last = h.sendWith(path, "last", 100, streamBody, nil, nil) })
				time.Sleep(100 * time.Millisecond)
				held := 0.0
				if tc.wait > 100*time.Millisecond {
					held = 1
				}
				if got := h.scrapeMetric(`pylon_slot_share_held`); got != held {
					t.Errorf("slot_share_held = %v while the share is full, want %v", got, held)
				}
				wg.Wait()
				for name, o := range map[string]*outcome{"first": &first, "second": &second, "last": &last} {
					if o.err != nil || o.status != 200 {
						t.Fatalf("%s: %d %v %s", name, o.status, o.err, o.body)
					}
				}
				if first.header["x-engine-queued"] != "" || second.header["x-engine-queued"] != "" {
					t.Errorf("the share's own requests were queued by the engine: %q, %q", first.header["x-engine-queued"], second.header["x-engine-queued"])
				}
				if got := last.header["x-engine-queued"]; got != tc.queued {
					t.Errorf("the third request's x-engine-queued = %q, want %q", got, tc.queued)
				}
				// Sent 100 ms after the first, its first bytes come only after the first ends.
				if end := first.end - 100*time.Millisecond; last.firstChunk < end {
					t.Errorf("the third request's first bytes %v after sending, before the first request ended (%v)", last.firstChunk, end)
				}
				for outcome, want := range tc.holds {
					if got := h.scrapeMetric(`pylon_slot_share_holds_total{outcome="` + outcome + `"}`); got != want {
						t.Errorf("slot_share_holds_total{%s} = %v, want %v", outcome, got, want)
					}
				}
				if got := h.scrapeMetric(`pylon_slot_share_held`); got != 0 {
					t.Errorf("slot_share_held = %v after every request ended, want 0", got)
				}
			})
		})
	}
}

// A held request whose client (the gateway) goes away meanwhile (it gave up on the
// attempt and retried elsewhere) is dropped within a check period: it never reaches the
// engine, its hold ends as client_gone, and the pylon counts it neither held nor queued.
func TestHermeticSlotShareHoldClientGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newShareHermetic(t, pylon.DefaultConfig().Admission.SlotShareWait)
		defer h.close()

		const path = "/v1/chat/completions"
		noQueue := map[string]string{wire.HeaderExpectedQueueMs: "0"}
		var wg sync.WaitGroup
		var last outcome
		wg.Go(func() { h.sendWith(path, "first", 100, streamBody, nil, noQueue) })
		wg.Go(func() { h.sendWith(path, "second", 100, streamBody, nil, noQueue) })
		time.Sleep(100 * time.Millisecond)
		wg.Go(func() { last = h.sendWith(path, "last", 100, streamBody, nil, nil) })
		time.Sleep(400 * time.Millisecond)
		synctest.Wait()
		if got := h.scrapeMetric(`pylon_slot_share_held`); got != 1 {
			t.Fatalf("slot_share_held = %v with the third request sent, want 1", got)
		}
		h.gone.Store("last", true)
		wg.Wait()
		if last.status != relay.StatusClientClosedRequest || last.end > 800*time.Millisecond {
			t.Errorf("the held request: %d after %v, want 499 within a check period of its client leaving", last.status, last.end)
		}
		for outcome, want := range map[string]float64{"released": 0, "timeout": 0, "client_gone": 1} {
			if got := h.scrapeMetric(`pylon_slot_share_holds_total{outcome="` + outcome + `"}`); got != want {
				t.Errorf("slot_share_holds_total{%s} = %v, want %v", outcome, got, want)
			}
		}
		if got := engineCompleted(t, h); got != 2 {
			t.Errorf("the engine completed %v requests, want 2: the held one must never reach it", got)
		}
		if got := h.scrapeMetric(`pylon_slot_share_held`); got != 0 {
			t.Errorf("slot_share_held = %v after every request ended, want 0", got)
		}
		h.await(time.Second, running(0))
	})
}

// newShareHermetic is a pylon with a slot share of 2 (and --engine-slot-share-wait wait)
// in front of an engine with 2 slots, each request 100 ms to its first token then 2
// tokens 1 s apart, once its first registration shows the engine idle.
func newShareHermetic(t *testing.T, wait time.Duration) *hermetic {
	t.Helper()
	cfg := pylon.DefaultConfig()
	cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
	cfg.Admission.SlotShare, cfg.Admission.SlotShareWait = 2, wait
	h := newHermetic(t, cfg, mock.Config{
		PrefillTokensPerSecond: 1e6, TTFT: 100 * time.Millisecond, TokenDelay: time.Second,
		NumTokens: 2, MaxConcurrentRequests: 2,
	})
	h.await(time.Second, running(0))
	return h
}

// engineCompleted sums the mock engine's requests_completed_total.
func engineCompleted(t *testing.T, h *hermetic) float64 {
	t.Helper()
	c := &fasthttp.HostClient{Addr: "engine", Dial: h.dial}
	defer c.CloseIdleConnections()
	status, body, err := c.Get(nil, "http://engine/metrics")
	if err != nil || status != 200 {
		t.Fatalf("engine /metrics: %v %d", err, status)
	}
	total := 0.0
	for line := range strings.SplitSeq(string(body), "\n") {
		if name, v, ok := strings.Cut(line, " "); ok && strings.HasSuffix(strings.SplitN(name, "{", 2)[0], "requests_completed_total") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("engine metric line %q", line)
			}
			total += f
		}
	}
	return total
}

package pylon_test

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// An engine that freezes (it accepts connections and answers nothing) is found out by the
// liveness watch after three checks in a row without an answer, within 3.5 s with the default
// 1 s check timeout: the request it held is answered 503 local_connect_failure, retryable
// (for the gateway to retry elsewhere), not after the 30 s first-output timeout; a new
// request is answered so at once, as is the gateway's /health probe; and once the engine
// answers again, so do requests.
func TestHermeticFrozenEngineIsFoundOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &standIn{exposition: fixture(t, "vllm_v0.10.txt"), models: vllmModels(qwen, qwen), served: []string{qwen}}
		h := newStandInHermetic(t, realEngineConfig("vllm", qwen), s)
		h.await(3*time.Second, func(r received) bool { _, ok := modelStats(r, qwen); return ok })
		body := `{"model":"` + qwen + `","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
		chat := func(id string) (outcome, time.Duration) {
			start := time.Now()
			o := h.sendWith("/v1/chat/completions", id, 10, body, nil, map[string]string{wire.HeaderModel: qwen})
			return o, time.Since(start)
		}
		if o, _ := chat("before"); o.status != 200 {
			t.Fatalf("before the freeze: %d %s", o.status, o.body)
		}
		thaw := make(chan struct{})
		s.mu.Lock()
		s.frozen = thaw
		s.mu.Unlock()
		var wg sync.WaitGroup
		var held outcome
		var took time.Duration
		wg.Go(func() { held, took = chat("held") })
		wg.Wait()
		if held.status != 503 || held.header[wire.HeaderRetryable] != "true" || held.header[wire.HeaderRetryReason] != wire.RetryLocalConnectFailure || took > 3500*time.Millisecond {
			t.Errorf("the request the frozen engine held: %d %q/%q after %v (%s), want a retryable 503 within 3.5 s",
				held.status, held.header[wire.HeaderRetryable], held.header[wire.HeaderRetryReason], took, held.body)
		}
		if o, took := chat("new"); o.status != 503 || took != 0 || !strings.Contains(o.body, "answers nothing") {
			t.Errorf("a new request while the engine is unresponsive: %d after %v (%s), want 503 at once", o.status, took, o.body)
		}
		status, _, err := h.client.Get(nil, "http://pylon"+wire.HealthPath)
		if err != nil || status != 503 {
			t.Errorf("the gateway's health probe while the engine is unresponsive: %d %v, want 503", status, err)
		}
		if got := h.scrapeMetric(`pylon_engine_unresponsive`); got != 1 {
			t.Errorf("engine_unresponsive = %v, want 1", got)
		}
		s.mu.Lock()
		s.frozen = nil
		s.mu.Unlock()
		close(thaw)
		time.Sleep(time.Second) // the next check is answered
		if o, _ := chat("after"); o.status != 200 {
			t.Errorf("after the engine thawed: %d %s", o.status, o.body)
		}
		if got := h.scrapeMetric(`pylon_engine_unresponsive_total`); got != 1 {
			t.Errorf("engine_unresponsive_total = %v, want 1", got)
		}
		if got := h.scrapeMetric(`pylon_engine_unresponsive`); got != 0 {
			t.Errorf("engine_unresponsive = %v after it answered again, want 0", got)
		}
		h.close()
	})
}

// --engine-check-timeout must not be negative.
func TestEngineCheckTimeoutNotNegative(t *testing.T) {
	cfg := pylon.DefaultConfig()
	cfg.ModelNames, cfg.EngineCheckTimeout = []string{"m"}, -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "engine-check-timeout") {
		t.Errorf("a negative check timeout: %v", err)
	}
}

// A stream the engine stops feeding when it freezes ends with an error event once the
// liveness watch finds the engine unresponsive (its reads silent all the while the checks
// were), within about 5 s, not after the 30 s stream idle timeout.
func TestHermeticFrozenEngineEndsItsStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &standIn{exposition: fixture(t, "vllm_v0.10.txt"), models: vllmModels(qwen, qwen), served: []string{qwen}, streams: true}
		h := newStandInHermetic(t, realEngineConfig("vllm", qwen), s)
		h.await(3*time.Second, func(r received) bool { _, ok := modelStats(r, qwen); return ok })
		body := `{"model":"` + qwen + `","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		first := make(chan struct{})
		var o outcome
		var wg sync.WaitGroup
		start := time.Now()
		wg.Go(func() {
			o = h.sendWith("/v1/chat/completions", "streamed", 10, body, first, map[string]string{wire.HeaderModel: qwen})
		})
		<-first
		thaw := make(chan struct{})
		s.mu.Lock()
		s.frozen = thaw
		s.mu.Unlock()
		frozeAt := time.Since(start)
		wg.Wait()
		if o.status != 200 || !strings.Contains(o.body, `"error"`) || strings.Contains(o.body, "[DONE]") || o.end-frozeAt > 5*time.Second {
			t.Errorf("the stream of a frozen engine: %d, ended %v after the freeze with %q; want an error event within 5 s", o.status, o.end-frozeAt, o.body)
		}
		s.mu.Lock()
		s.frozen = nil
		s.mu.Unlock()
		close(thaw)
		h.close()
	})
}

// A canary that failed while the engine was frozen makes the models INACTIVE; once the
// liveness watch finds the engine answering again, a canary round runs at once, and the
// models are ACTIVE again within a second or so, not at the next canary period (10 s here).
func TestHermeticThawedEngineRunsCanaryAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &standIn{exposition: fixture(t, "vllm_v0.10.txt"), models: vllmModels(qwen, qwen), served: []string{qwen}}
		cfg := realEngineConfig("vllm", qwen)
		cfg.CanaryInterval = 10 * time.Second
		h := newStandInHermetic(t, cfg, s)
		status := func(want string) func(received) bool {
			return func(r received) bool { m, ok := r.reg.Models[qwen]; return ok && m.Status == want }
		}
		h.await(3*time.Second, status(wire.StatusActive))
		thaw := make(chan struct{})
		s.mu.Lock()
		s.frozen = thaw
		s.mu.Unlock()
		h.await(15*time.Second, status(wire.StatusInactive)) // the canary at 10 s fails
		time.Sleep(2 * time.Second)
		s.mu.Lock()
		s.frozen = nil
		s.mu.Unlock()
		close(thaw)
		thawed := time.Now()
		h.await(3*time.Second, status(wire.StatusActive))
		if took := time.Since(thawed); took > 2*time.Second {
			t.Errorf("ACTIVE again %v after the engine thawed, want within 2 s (the next canary period is 10 s)", took)
		}
		h.close()
	})
}

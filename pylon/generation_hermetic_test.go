package pylon_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// A request whose admission hits a bug in its generation gets a retryable 503
// problem+json at once, and the next request is admitted and relayed at once by the
// restarted generation. A generation failing over protoactor's limit (10 restarts within
// 10 s) stops for good and is replaced by a new generation: the model keeps being served.
func TestHermeticGenerationFailureAnswersAtOnceAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		h := newHermetic(t, cfg, mock.Config{NumTokens: 3})
		defer h.close()
		h.await(time.Second, running(0))
		if o := h.send("/v1/chat/completions", "before", 10, streamBody, nil); o.status != 200 {
			t.Fatalf("before the fault: %d %s", o.status, o.body)
		}

		failed := func(o outcome, what string) {
			t.Helper()
			if o.status != 503 || o.header[wire.HeaderRetryable] != "true" || o.header[wire.HeaderRetryReason] != wire.RetryModelGenerationUnavail {
				t.Errorf("%s: status %d, headers %v, want 503 retryable %s", what, o.status, o.header, wire.RetryModelGenerationUnavail)
			}
			if p := problemBody(t, &o); p["status"] != float64(503) || p["reason"] != wire.RetryModelGenerationUnavail {
				t.Errorf("%s: body %s", what, o.body)
			}
		}
		pylon.PanicOnAdmission(h.pylon, "boom")
		start := time.Now()
		o := h.send("/v1/chat/completions", "boom-1", 10, streamBody, nil)
		failedAfter := time.Since(start)
		failed(o, "the failing request")
		ok := h.send("/v1/chat/completions", "after-restart", 10, streamBody, nil)
		recovered := time.Since(start)
		if ok.status != 200 {
			t.Errorf("the request after the restart: %d %s, want 200", ok.status, ok.body)
		}
		if failedAfter != 0 || recovered != 0 {
			t.Errorf("restart: 503 after %v, next request answered after %v (virtual time), want both at once", failedAfter, recovered)
		}
		t.Logf("restart (virtual time): 503 after %v, next request admitted and answered after %v", failedAfter, recovered)

		// Ten more failures in the same instant: the generation stops for good.
		for i := 2; len(h.logs.matching("model_generation_stopped")) == 0; i++ {
			if i > 11 {
				t.Fatal("the generation did not stop after 11 failures within 10 s")
			}
			failed(h.send("/v1/chat/completions", fmt.Sprintf("boom-%d", i), 10, streamBody, nil), "a failing request")
		}
		stopped := time.Now()
		synctest.Wait() // the replacement is spawned on a goroutine of its own
		pylon.PanicOnAdmission(h.pylon, "")
		ok = h.send("/v1/chat/completions", "after-replacement", 10, streamBody, nil)
		replaced := time.Since(stopped)
		if ok.status != 200 {
			t.Errorf("the request after the replacement: %d %s, want 200", ok.status, ok.body)
		}
		if replaced != 0 {
			t.Errorf("next request answered %v after the stop, want at once", replaced)
		}
		if l := h.logs.matching("model_generation_replaced"); len(l) != 1 {
			t.Errorf("replacement logs: %q, want one", l)
		}
		t.Logf("stop for good (virtual time): next request admitted and answered %v after the stop", replaced)
		// The gateways learn the new generation from a registration.
		h.await(2*time.Second, func(r received) bool {
			m, ok := r.reg.Models["dummy-model"]
			return ok && m.Generation > 1
		})
	})
}

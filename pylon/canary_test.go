package pylon_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

func status(want string) func(received) bool {
	return func(r received) bool {
		m, ok := r.reg.Models["dummy-model"]
		return r.method == "PUT" && ok && m.Status == want
	}
}

// engineControl PUTs a test-control body for dummy-model to the in-process engine.
func engineControl(t *testing.T, h *hermetic, body string) {
	t.Helper()
	c := &fasthttp.HostClient{Addr: "engine", Dial: h.dial}
	defer c.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("PUT")
	req.SetRequestURI("http://engine/test-control/models/dummy-model")
	req.SetBodyString(body)
	if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("PUT test-control %s: %v %d %s", body, err, resp.StatusCode(), resp.Body())
	}
}

// Canaries: a failing canary advertises the model INACTIVE within one canary interval and a
// passing one restores ACTIVE; a canary that generates exactly the threshold's tokens is a
// runaway generation (INACTIVE); with canaries off nothing changes.
func TestHermeticCanaries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		cfg.CanaryInterval, cfg.CanaryTimeout = time.Second, 500*time.Millisecond
		h := newHermetic(t, cfg, mock.Config{NumTokens: 3})
		h.await(time.Second, status(wire.StatusActive))
		engineControl(t, h, `{"chat_failure":true}`)
		start := time.Now()
		h.await(3*time.Second, status(wire.StatusInactive))
		if got := time.Since(start); got > time.Second+100*time.Millisecond {
			t.Errorf("INACTIVE after %v, want within one canary interval", got)
		}
		engineControl(t, h, `{"chat_failure":false}`)
		h.await(3*time.Second, status(wire.StatusActive))
		h.close()

		runaway := newHermetic(t, cfg, mock.Config{NumTokens: 300}) // min(237, 300) = the threshold
		runaway.await(3*time.Second, status(wire.StatusInactive))
		runaway.close()

		cfg.CanaryInterval = 0
		off := newHermetic(t, cfg, mock.Config{NumTokens: 300})
		off.await(time.Second, status(wire.StatusActive))
		time.Sleep(5 * time.Second)
		for len(off.regs) > 0 {
			if r := <-off.regs; r.method == "PUT" && r.reg.Models["dummy-model"].Status != wire.StatusActive {
				t.Errorf("canaries off: %+v", r.reg.Models)
			}
		}
		off.close()
	})
}

package pylon_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/pylon"
)

// calibrationRequests is the engine's count of pylon-generated (calibration-/canary-) requests.
func calibrationRequests(t *testing.T, h *hermetic) uint64 {
	t.Helper()
	c := &fasthttp.HostClient{Addr: "engine", Dial: h.dial}
	defer c.CloseIdleConnections()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://engine/test-control")
	if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("GET /test-control: %v %d", err, resp.StatusCode())
	}
	var snap mock.ControlSnapshot
	if err := json.Unmarshal(resp.Body(), &snap); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, r := range snap.Requests {
		if r.Class == "pylon_generated" {
			n += r.Count
		}
	}
	return n
}

// With --do-calibration the very first registration already carries a valid
// last_mean_input_tps close to the engine's prefill rate, observed from the calibration
// requests (through the fallback samples, or the engine stats stream when it feeds).
func TestHermeticCalibrationBeforeFirstRegistration(t *testing.T) {
	for _, stream := range []string{"off", "auto"} {
		t.Run("engine-stats-stream="+stream, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const prefill = 20000.0
				cfg := pylon.DefaultConfig()
				cfg.ModelNames, cfg.EngineStatsStream, cfg.DoCalibration = []string{"dummy-model"}, stream, true
				h := newHermetic(t, cfg, mock.Config{PrefillTokensPerSecond: prefill, NumTokens: 4})
				start := time.Now()
				first := h.await(time.Minute, func(r received) bool { return r.method == "PUT" })
				s, ok := modelStats(first, "dummy-model")
				if !ok {
					t.Fatalf("first registration without the model: %+v", first.reg)
				}
				t.Logf("first registration after %v: last_mean_input_tps %.1f, stats %+v", first.at.Sub(start), s.LastMeanInputTPS, s)
				if math.Abs(s.LastMeanInputTPS-prefill) > 0.05*prefill {
					t.Errorf("first registration last_mean_input_tps %.1f, want within 5%% of %v", s.LastMeanInputTPS, prefill)
				}
				// Default ramp: 5+10+20+40+80 requests.
				if n := calibrationRequests(t, h); n != 155 {
					t.Errorf("engine saw %d calibration requests, want 155", n)
				}
				h.close()
			})
		})
	}
}

// A step that exceeds the calibration timeout stops the ramp; the pylon still registers
// with the throughput that the completed requests produced.
func TestHermeticCalibrationSaturationStopsRamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream, cfg.DoCalibration = []string{"dummy-model"}, "off", true
		cfg.CalibrationTimeout = time.Second
		// One slot and 100 ms per request: step 0 (5 requests) takes ~0.56 s, step 1
		// (10 requests, 2 in flight, serialized by the engine) would take ~1.26 s.
		h := newHermetic(t, cfg, mock.Config{
			PrefillTokensPerSecond: 20000, TTFT: 100 * time.Millisecond, NumTokens: 1, MaxConcurrentRequests: 1,
		})
		start := time.Now()
		first := h.await(time.Minute, func(r received) bool { return r.method == "PUT" })
		s, _ := modelStats(first, "dummy-model")
		if s.LastMeanInputTPS <= 0 {
			t.Errorf("registration after a saturated ramp has no input tps: %+v", s)
		}
		if d := first.at.Sub(start); d > 3*time.Second {
			t.Errorf("first registration after %v: the ramp did not stop at the saturated step", d)
		}
		time.Sleep(5 * time.Second) // abandoned requests finish; no further step starts
		if n := calibrationRequests(t, h); n < 6 || n > 15 {
			t.Errorf("engine saw %d calibration requests, want step 0 (5) and part of step 1 (≤ 10)", n)
		}
		h.close()
	})
}

// Without any valid input-throughput sample the pylon fails its startup and never registers.
func TestHermeticCalibrationFailsWithoutSamples(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream, cfg.DoCalibration = []string{"not-served"}, "off", true
		h := newHermetic(t, cfg, mock.Config{})
		<-h.pylonDone
		if !errors.Is(h.runErr, pylon.ErrCalibration) || !strings.Contains(h.runErr.Error(), "no valid input TPS") {
			t.Errorf("Run = %v, want ErrCalibration", h.runErr)
		}
		h.runErr = nil
		for _, r := range h.close() {
			t.Errorf("control request %s from a pylon that failed calibration", r.method)
		}
	})
}

func TestCalibrationConfig(t *testing.T) {
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.DoCalibration, cfg.InitialInputTPS = "http://engine:1", true, 1000
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "do-calibration and initial-input-tps are mutually exclusive") {
		t.Errorf("Validate = %v, want the mutual exclusion", err)
	}
	cfg.InitialInputTPS, cfg.CalibrationMaxConcurrency, cfg.CalibrationTimeout = 0, 0, 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "calibration-max-concurrency") || !strings.Contains(err.Error(), "bringup-calibration-timeout") {
		t.Errorf("Validate = %v, want both calibration errors", err)
	}
	cfg = pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.DoCalibration = "http://engine:1", true
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults with calibration: %v", err)
	}
}

// Without --model-name the pylon first discovers the engine's models, calibrates them and
// only then registers.
func TestHermeticCalibrationWithDiscovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.EngineStatsStream, cfg.DoCalibration = "off", true
		cfg.CalibrationPromptUnits, cfg.CalibrationMaxConcurrency = 512, 2
		h := newHermetic(t, cfg, mock.Config{PrefillTokensPerSecond: 10000, NumTokens: 1})
		first := h.await(time.Minute, func(r received) bool { return r.method == "PUT" })
		if s, ok := modelStats(first, "dummy-model"); !ok || math.Abs(s.LastMeanInputTPS-10000) > 500 {
			t.Errorf("first registration: %+v, want dummy-model at ~10000 input tps", first.reg)
		}
		if n := calibrationRequests(t, h); n != 15 {
			t.Errorf("engine saw %d calibration requests, want 5+10", n)
		}
		h.close()
	})
}

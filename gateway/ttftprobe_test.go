package gateway_test

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// ttftSeries names one TTFT-estimate series of model m and cluster c1.
func ttftSeries(name string) string {
	return `switchyard_` + name + `{model="m",cluster_id="c1"}`
}

// A streamed attempt's TTFT estimate and its observed time to first byte reach the
// ttft_estimate_error_* series of its model and cluster: 100 input tokens at 1000 tokens/s
// (RTT 0 on virtual time) are estimated at 100 ms; the pylon answers after 250 ms, so the
// error is 150 ms, 1.5 of the estimate, and the estimate was exceeded. A stream that
// fails after its first byte and a buffered answer are not observed.
func TestTTFTEstimateErrorReachesMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MaxConnectRetries: -1, MaxRequestRetries: -1}, "")
		h.register(h.pylon("p1", "c1", idleLoad(), func(call int, ctx *fasthttp.RequestCtx) {
			time.Sleep(250 * time.Millisecond) // queue + prefill on the engine
			if call == 3 {                     // a buffered answer
				ctx.SetContentType("application/json")
				ctx.SetBodyString(`{"ok":true}`)
				return
			}
			ctx.SetContentType("text/event-stream")
			body := &scriptedBody{chunks: events(2)}
			if call == 2 { // the pylon dies after its first event
				body.chunks, body.err = events(1), errPylonDied
			}
			ctx.SetBodyStream(body, -1)
		}))
		tokens := map[string]string{wire.HeaderInputTokens: "100"}
		if r := h.do("POST", "/v1/chat/completions", []byte(streamChat), tokens); r.status != 200 {
			t.Fatalf("streamed: %d %s", r.status, r.body)
		}
		synctest.Wait()
		want := map[string]string{
			ttftSeries("ttft_estimate_error_seconds_count"):                                   "1",
			ttftSeries("ttft_estimate_error_seconds_sum"):                                     "0.15",
			ttftSeries("ttft_estimate_error_ratio_count"):                                     "1",
			ttftSeries("ttft_estimate_error_ratio_sum"):                                       "1.5",
			ttftSeries("ttft_estimate_exceeded_total"):                                        "1",
			`switchyard_ttft_estimate_error_ratio_bucket{model="m",cluster_id="c1",le="1.5"}`: "1",
			`switchyard_ttft_estimate_error_ratio_bucket{model="m",cluster_id="c1",le="1"}`:   "0",
		}
		for series, v := range want {
			if got := metricLine(t, h, series); got != v {
				t.Errorf("%s = %q, want %s", series, got, v)
			}
		}
		// The observation also reached the cluster's correction.
		learned := func() int {
			var st struct {
				Targets []struct {
					TTFTCorrections map[string]struct{ Observations int } `json:"ttft_corrections"`
				} `json:"targets"`
			}
			if err := json.Unmarshal([]byte(h.do("GET", "/debug/state", nil, nil).body), &st); err != nil || len(st.Targets) != 1 {
				t.Fatalf("/debug/state: %v, %d targets", err, len(st.Targets))
			}
			return st.Targets[0].TTFTCorrections["c1"].Observations
		}
		if got := learned(); got != 1 {
			t.Errorf("c1's correction learned from %d observations, want 1", got)
		}
		h.do("POST", "/v1/chat/completions", []byte(streamChat), tokens)                                                  // its first byte, then it fails
		h.do("POST", "/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), tokens) // buffered
		synctest.Wait()
		if got := metricLine(t, h, ttftSeries("ttft_estimate_error_seconds_count")); got != "1" {
			t.Errorf("after a failed stream and a buffered answer: %s observations, want still 1", got)
		}
		if got := learned(); got != 1 {
			t.Errorf("after a failed stream and a buffered answer: c1's correction learned from %d observations, want still 1", got)
		}
	})
}

package gateway_test

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// A backend that left the fleet keeps its series on /metrics for the retention, then they
// go, with its cluster's TTFT-estimate series; a backend still registered keeps its own.
func TestDepartedBackendSeriesAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const retention = 5 * time.Minute
		h := newHarness(t, gateway.Config{SeriesRetention: retention}, `{"default":"round-robin"}`)
		answer := func(_ int, ctx *fasthttp.RequestCtx) {
			switch {
			case bytes.Contains(ctx.PostBody(), []byte(`"stream":true`)):
				ctx.SetContentType("text/event-stream")
				ctx.SetBodyStream(&scriptedBody{chunks: append(events(2), "data: [DONE]\n\n"), gap: time.Millisecond}, -1)
			case len(ctx.Request.Header.Peek("x-test-refuse")) > 0: // counted under its own result and status
				ctx.SetStatusCode(fasthttp.StatusBadRequest)
				ctx.SetBodyString(`{"error":{"message":"no"}}`)
			default:
				ctx.SetContentType("application/json")
				ctx.SetBodyString(`{"ok":true}`)
			}
		}
		p1, p2 := h.pylon("p1", "c1", idleLoad(), answer), h.pylon("p2", "c2", idleLoad(), answer)
		h.register(p1)
		h.register(p2)
		for _, send := range []func(){ // in pairs: round-robin gives each pylon one of each
			func() { h.do("POST", "/v1/chat/completions", []byte(streamChat), nil) },
			func() { h.chat(nil) },
			func() { h.chat(map[string]string{"x-test-refuse": "1"}) },
		} {
			send()
			send()
		}
		synctest.Wait()
		for _, want := range []string{
			`proxy_duration_seconds_count{routing_key="",model="m",inference_server_id="p1"}`,
			`proxy_attempts_total{routing_key="",model="m",inference_server_id="p1",result="upstream_400"}`,
			`requests_total{routing_key="",model="m",inference_server_id="p1",status="400"}`,
			`ttft_estimate_error_ratio_count{model="m",cluster_id="c1"}`,
		} {
			if m := h.do("GET", "/metrics", nil, nil).body; !strings.Contains(m, want) {
				t.Fatalf("before p1 leaves: no %s in\n%s", want, m)
			}
		}
		if r := h.do("DELETE", wire.RegistrationPath+"p1", nil, nil); r.status != 204 {
			t.Fatalf("deregister p1: %d %s", r.status, r.body)
		}
		synctest.Wait()
		// p2 beats every minute; p1 is gone. Within the retention p1's series stay.
		for range 4 {
			time.Sleep(time.Minute)
			h.register(p2)
		}
		if m := h.do("GET", "/metrics", nil, nil).body; !strings.Contains(m, `inference_server_id="p1"`) || !strings.Contains(m, `cluster_id="c1"`) {
			t.Fatalf("%v after p1 left: its series are gone already:\n%s", 4*time.Minute, m)
		}
		for range 3 {
			time.Sleep(time.Minute)
			h.register(p2)
		}
		m := h.do("GET", "/metrics", nil, nil).body
		if strings.Contains(m, `inference_server_id="p1"`) || strings.Contains(m, `cluster_id="c1"`) {
			t.Fatalf("%v after p1 left (retention %v): its series are still there:\n%s", 7*time.Minute, retention, m)
		}
		for _, want := range []string{
			`proxy_duration_seconds_count{routing_key="",model="m",inference_server_id="p2"}`,
			`requests_total{routing_key="",model="m",inference_server_id="p2",status="400"}`,
			`ttft_estimate_error_ratio_count{model="m",cluster_id="c2"}`,
		} {
			if !strings.Contains(m, want) {
				t.Fatalf("p2, still registered, lost %s:\n%s", want, m)
			}
		}
		// p1 back: its series start again.
		h.register(p1)
		for range 2 {
			h.chat(nil)
		}
		if m := h.do("GET", "/metrics", nil, nil).body; !strings.Contains(m, `requests_total{routing_key="",model="m",inference_server_id="p1",status="200"} 1`) {
			t.Fatalf("p1 registered again: its series did not start again from zero:\n%s", m)
		}
	})
}

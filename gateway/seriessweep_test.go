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

// A routing target no backend serves any more (its model gone) loses its series once its
// scheduler has been collected for the retention; the series of requests for unknown
// models (the empty target) stay.
func TestDepartedTargetSeriesAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{SeriesRetention: 5 * time.Minute, TargetCollectGrace: 5 * time.Second}, "")
		ok := func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"ok":true}`)
		}
		p := h.pylon("p1", "c1", idleLoad(), ok)
		h.registerModel(p, "adapter-1", 60_000)
		if r := h.do("POST", "/v1/chat/completions", []byte(`{"model":"adapter-1","messages":[{"role":"user","content":"hi"}]}`), nil); r.status != 200 {
			t.Fatalf("adapter-1: %d %s", r.status, r.body)
		}
		if r := h.do("POST", "/v1/chat/completions", []byte(`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`), nil); r.status != 404 {
			t.Fatalf("unknown model: %d %s", r.status, r.body)
		}
		const unknown = `requests_total{routing_key="",model="",inference_server_id="",status="404"} 1`
		if m := h.do("GET", "/metrics", nil, nil).body; !strings.Contains(m, `model="adapter-1"`) || !strings.Contains(m, unknown) {
			t.Fatalf("before: no adapter-1 or unknown-model series:\n%s", m)
		}
		for range 7 { // the engine unloads the adapter: p1 now serves m only
			h.register(p)
			time.Sleep(time.Minute)
		}
		m := h.do("GET", "/metrics", nil, nil).body
		if strings.Contains(m, `model="adapter-1"`) {
			t.Fatalf("7 minutes after adapter-1 left (retention 5m): its series stayed:\n%s", m)
		}
		if !strings.Contains(m, unknown) {
			t.Fatalf("the unknown-model series went:\n%s", m)
		}
	})
}

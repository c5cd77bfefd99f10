package gateway_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
	"github.com/switchyard/switchyard/internal/tracing/otlptest"
)

// With real binaries: the gateway, a pylon and the mock engine, each started with
// --otlp-endpoint pointing at an in-process OTLP/HTTP receiver, export one streamed
// request's spans over the wire — protobuf to /v1/traces, decoded by the receiver — all in
// the trace of the client's traceparent, gateway.request under the client's span, each
// span under its service's name; a request refused before routing arrives as its own
// gateway.request span with its error code.
func TestTracesReachAnOTLPReceiver(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "") // the flag alone
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  // export every 100 ms, not every 5 s
	gw, admin, eng, pyl := mocktest.FreeAddr(t), mocktest.FreeAddr(t), mocktest.FreeAddr(t), mocktest.FreeAddr(t)
	otlp := []string{"--otlp-endpoint", rcv.URL, "--trace-sample", "1"}
	start(t, "gateway", append([]string{"--http-listen-addr", gw, "--admin-listen-addr", admin, "--health-probe-interval-ms", "200"}, otlp...)...)
	start(t, "engine", append([]string{"--http-listen-addr", eng}, otlp...)...)
	start(t, "pylon", append([]string{
		"--http-listen-addr", pyl, "--admin-listen-addr", mocktest.FreeAddr(t), "--upstream-http-base-url", "http://" + eng,
		"--model-name", "dummy-model", "--gateway", "http://" + admin, "--inference-server-id", "p1", "--initial-input-tps", "10000",
		"--min-update-interval-ms", "200", "--log-level", "warn",
	}, otlp...)...)
	f := &fleetE2E{t: t, gateway: gw, admin: admin, client: &fasthttp.HostClient{Addr: gw}, adminC: &fasthttp.HostClient{Addr: admin}}
	t.Cleanup(f.client.CloseIdleConnections)
	t.Cleanup(f.adminC.CloseIdleConnections)
	f.waitRoutable(1)

	const (
		clientTrace   = "4bf92f3577b34da6a3ce929d0e0e4736"
		clientSpan    = "00f067aa0ba902b7"
		refusedTrace  = "5cf92f3577b34da6a3ce929d0e0e4737"
		refusedParent = "10f067aa0ba902b8"
	)
	status, body, _ := f.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"x"}]}`),
		map[string]string{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01", "x-request-id": "req-otlp"})
	if status != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("streamed request: %d %s", status, body)
	}
	if status, body, _ := f.do("POST", "/v1/chat/completions", []byte(`{"model":`),
		map[string]string{"traceparent": "00-" + refusedTrace + "-" + refusedParent + "-01"}); status != 400 {
		t.Fatalf("bad body: %d %s, want 400", status, body)
	}

	// span name → the service that must have sent it, for the streamed request's trace.
	want := map[string]string{
		"gateway.request": "switchyard-gateway", "gateway.route": "switchyard-gateway", "gateway.attempt": "switchyard-gateway",
		"gateway.stream": "switchyard-gateway", "pylon.relay": "switchyard-pylon", "engine.generate": "switchyard-engine",
	}
	byName := func(trace string) map[string][]otlptest.Span {
		m := map[string][]otlptest.Span{}
		for _, s := range rcv.Spans() {
			if s.TraceID == trace {
				m[s.Name] = append(m[s.Name], s)
			}
		}
		return m
	}
	arrived := func() bool {
		got, refused := byName(clientTrace), byName(refusedTrace)
		for name := range want {
			if len(got[name]) == 0 {
				return false
			}
		}
		return len(refused["gateway.request"]) > 0
	}
	if !poll(10*time.Second, 20*time.Millisecond, arrived) {
		all := rcv.Spans()
		names := make([]string, 0, len(all))
		for _, s := range all {
			names = append(names, s.Service+"/"+s.Name+"@"+s.TraceID)
		}
		t.Fatalf("spans received in %d exports: %v; want %v in trace %s and a refused gateway.request in %s",
			rcv.Requests(), names, want, clientTrace, refusedTrace)
	}
	if p := rcv.Problems(); len(p) > 0 {
		t.Errorf("the receiver refused exports: %v", p)
	}

	got := byName(clientTrace)
	for name, service := range want {
		if len(got[name]) != 1 || got[name][0].Service != service {
			t.Errorf("%s: %+v, want one from %s", name, got[name], service)
		}
	}
	root := got["gateway.request"][0]
	if root.ParentID != clientSpan || root.Attrs["switchyard.request_id"] != "req-otlp" || root.Attrs["http.response.status_code"] != "200" {
		t.Errorf("gateway.request: parent %s, attributes %v; want the client's span %s, request id req-otlp, status 200", root.ParentID, root.Attrs, clientSpan)
	}
	parents := map[string]string{ // span → its parent's name
		"gateway.route": "gateway.request", "gateway.attempt": "gateway.request", "gateway.stream": "gateway.request",
		"pylon.relay": "gateway.attempt", "engine.generate": "pylon.relay",
	}
	for name, parent := range parents {
		if s, p := got[name][0], got[parent][0]; s.ParentID != p.SpanID {
			t.Errorf("%s: parent span %s, want %s's %s", name, s.ParentID, parent, p.SpanID)
		}
	}

	refused := byName(refusedTrace)
	names := make([]string, 0, len(refused))
	for name := range refused {
		names = append(names, name)
	}
	r := refused["gateway.request"][0]
	if !slices.Equal(names, []string{"gateway.request"}) || r.ParentID != refusedParent || r.Service != "switchyard-gateway" ||
		r.Attrs["switchyard.error_code"] != "invalid_request" || r.Attrs["http.response.status_code"] != "400" {
		t.Errorf("refused request: spans %v, request span %+v; want one gateway.request under %s, error code invalid_request, status 400",
			names, r, refusedParent)
	}
}

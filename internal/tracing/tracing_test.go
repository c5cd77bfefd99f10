package tracing_test

import (
	"context"
	"testing"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/switchyard/switchyard/internal/tracing"
	"github.com/switchyard/switchyard/internal/tracing/otlptest"
)

func TestOffByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	f := tracing.Flags{TraceSample: 1}
	tr, stop, err := f.Start("gateway", "test")
	if err != nil || tr != nil {
		t.Fatalf("Start without an endpoint = %v, %v; want a nil tracer", tr, err)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEnvironmentEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
	f := tracing.Flags{TraceSample: 1}
	if got := f.Endpoint(); got != "http://collector:4318" {
		t.Fatalf("Endpoint = %q", got)
	}
	f.OTLPEndpoint = "http://flag:4318"
	if got := f.Endpoint(); got != "http://flag:4318" {
		t.Fatalf("Endpoint with the flag = %q, want the flag's", got)
	}
	tr, stop, err := f.Start("pylon", "test")
	if err != nil || tr == nil {
		t.Fatalf("Start = %v, %v; want a tracer", tr, err)
	}
	_ = stop(context.Background()) // nothing recorded: nothing to send
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		f  tracing.Flags
		ok bool
	}{
		{tracing.Flags{TraceSample: 1}, true},
		{tracing.Flags{TraceSample: 0.1, OTLPEndpoint: "https://collector:4318"}, true},
		{tracing.Flags{TraceSample: 1.5}, false},
		{tracing.Flags{TraceSample: -0.1}, false},
		{tracing.Flags{TraceSample: 1, OTLPEndpoint: "collector:4318"}, false},
	} {
		if err := c.f.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate = %v, want ok %v", c.f, err, c.ok)
		}
	}
}

// Inject writes what Extract reads back, through a fasthttp header.
func TestHeaderRoundTrip(t *testing.T) {
	var h fasthttp.RequestHeader
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.Set("tracestate", "vendor=1")
	ctx := tracing.Extract(context.Background(), &h)
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
		t.Fatalf("extracted %v", sc)
	}
	var out fasthttp.RequestHeader
	tracing.Inject(ctx, &out)
	if got := string(out.Peek("traceparent")); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("injected traceparent %q", got)
	}
	if got := string(out.Peek("tracestate")); got != "vendor=1" {
		t.Errorf("injected tracestate %q", got)
	}
}

// The tracer Start builds for --otlp-endpoint posts its spans over OTLP/HTTP (protobuf, to
// URL/v1/traces) to a real receiver: a span started under a client's traceparent keeps the
// client's trace id and has the client's span as parent, and the resource names the
// service and its version. Shutdown flushes what the batch holds. The exporter's standard
// variables apply: headers (a collector's API key) and gzip compression.
func TestExportToAnOTLPReceiver(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=k1")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	rcv := otlptest.Start(t)
	f := tracing.Flags{OTLPEndpoint: rcv.URL + "/", TraceSample: 1}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	tr, shutdown, err := f.Start("gateway", "v-test")
	if err != nil || tr == nil {
		t.Fatalf("Start = %v, %v", tr, err)
	}
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	var h fasthttp.RequestHeader
	h.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	ctx, span := tr.Start(tracing.Extract(context.Background(), &h), "gateway.request", trace.WithSpanKind(trace.SpanKindServer))
	span.SetAttributes(attribute.Int("http.response.status_code", 200))
	_, child := tr.Start(ctx, "gateway.attempt")
	child.End()
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown (flush): %v", err)
	}

	if p := rcv.Problems(); len(p) > 0 {
		t.Fatalf("the receiver refused exports: %v", p)
	}
	spans := map[string]otlptest.Span{}
	for _, s := range rcv.Spans() {
		spans[s.Name] = s
	}
	root, attempt := spans["gateway.request"], spans["gateway.attempt"]
	if len(spans) != 2 || root.Name == "" || attempt.Name == "" {
		t.Fatalf("received %v, want gateway.request and gateway.attempt", rcv.Spans())
	}
	for _, s := range []otlptest.Span{root, attempt} {
		if s.TraceID != clientTrace || s.Service != "switchyard-gateway" || s.Version != "v-test" {
			t.Errorf("%s: trace %s, service %q %q; want the client's %s, switchyard-gateway v-test", s.Name, s.TraceID, s.Service, s.Version, clientTrace)
		}
	}
	if root.ParentID != clientSpan || attempt.ParentID != root.SpanID || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("parents: request %s (kind %v), attempt %s; want the client's %s, a server span, and the request's %s",
			root.ParentID, root.Kind, attempt.ParentID, clientSpan, root.SpanID)
	}
	if got := root.Attrs["http.response.status_code"]; got != "200" {
		t.Errorf("http.response.status_code = %q, want 200", got)
	}
	if h := rcv.Header(); h.Get("x-api-key") != "k1" || h.Get("Content-Encoding") != "gzip" {
		t.Errorf("export headers %v, want x-api-key k1 and gzip", h)
	}
}

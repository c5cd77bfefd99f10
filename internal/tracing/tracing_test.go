package tracing_test

import (
	"context"
	"testing"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/internal/tracing"
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

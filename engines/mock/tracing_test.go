package mock_test

import (
	"testing"
	"testing/synctest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/tracing"
)

// A generation is one engine.generate span, a child of the request's traceparent (the
// pylon's relay span), with the prompt's cache outcome and the tokens it emitted; without
// a tracer there is none.
func TestGenerationSpanContinuesTheTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := tracing.NewProvider(sdktrace.NewSimpleSpanProcessor(exp), 1, "engine", "test")
		cfg := legacyCfg
		cfg.TTFT, cfg.TTFTJitter, cfg.DecodeJitter, cfg.TokenDelay = 0, 0, 0, 0
		h := startWith(t, cfg, mock.Deps{Tracer: tp.Tracer("engine")})
		defer h.stop()
		const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		resp := h.do(call{
			method: "POST", path: "/v1/chat/completions", body: chatBody(true, "x"),
			headers: hdrs("traceparent", parent, "x-input-tokens", "100", "x-output-tokens", "3"),
		})
		if resp.StatusCode() != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
		}
		synctest.Wait()
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%d spans, want 1", len(spans))
		}
		s := spans[0]
		if s.Name != "engine.generate" || s.SpanKind != trace.SpanKindServer {
			t.Errorf("span %q kind %v, want engine.generate, server", s.Name, s.SpanKind)
		}
		if got := s.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("trace id %s, want the request's", got)
		}
		if got := s.Parent.SpanID().String(); got != "00f067aa0ba902b7" {
			t.Errorf("parent span %s, want the request's", got)
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["gen_ai.usage.input_tokens"] != "100" || attrs["gen_ai.usage.output_tokens"] != "3" || attrs["gen_ai.request.model"] != "m" {
			t.Errorf("attributes %v", attrs)
		}
		if len(s.Events) != 1 || s.Events[0].Name != "prefilled" {
			t.Errorf("events %v, want one prefilled", s.Events)
		}
	})
}

package mock

import (
	"context"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/internal/tracing"
)

// startSpan starts the span of one generation, a child of the trace context its request
// carries (the pylon's relay span); nil when tracing is off.
func (e *Engine) startSpan(h *fasthttp.RequestHeader, g *gen) trace.Span {
	if e.tracer == nil {
		return nil
	}
	_, s := e.tracer.Start(tracing.Extract(context.Background(), h), "engine.generate",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("gen_ai.request.model", g.model.name),
			attribute.String("switchyard.request_id", g.id),
			attribute.Int64("gen_ai.usage.input_tokens", int64(min(g.req.inputTokens, 1<<62))),
			attribute.Bool("switchyard.stream", g.req.stream),
		))
	return s
}

// prefilled marks the end of the prompt's prefill on the span, with what the prefix
// cache held.
func (g *gen) prefilled() {
	if g.span == nil {
		return
	}
	g.span.AddEvent("prefilled", trace.WithAttributes(
		attribute.Bool("switchyard.kv_cache_hit", g.access.Hit),
		attribute.Int64("switchyard.kv_cache_reused_tokens", int64(min(g.access.Reused, 1<<62))),
	))
}

// endSpan closes the generation's span with the tokens it emitted.
func (g *gen) endSpan() {
	if g.span == nil {
		return
	}
	g.span.SetAttributes(attribute.Int("gen_ai.usage.output_tokens", g.emitted))
	g.span.End()
}

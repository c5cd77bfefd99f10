package pylon

import (
	"context"
	"errors"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/tracing"
)

// Tracer is an OpenTelemetry tracer (Deps.Tracer).
type Tracer = trace.Tracer

// startRelay starts the span of one request relayed to the engine, a child of the trace
// context its headers carry (the gateway's attempt), and writes the span's context to the
// request as traceparent: the engine's own spans, if it traces, are its children. nil
// when tracing is off (docs/tracing.md).
func (p *Pylon) startRelay(h *fasthttp.RequestHeader, model, id string, inputTokens uint64, stream bool) trace.Span {
	if p.tracer == nil {
		return nil
	}
	c, s := p.tracer.Start(tracing.Extract(context.Background(), h), "pylon.relay",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("gen_ai.request.model", model),
			attribute.String("switchyard.request_id", id),
			attribute.Int64("switchyard.input_tokens", int64(min(inputTokens, 1<<62))),
			attribute.Bool("switchyard.stream", stream),
			attribute.String("switchyard.server_id", p.cfg.ID),
			attribute.String("server.address", p.upstreamHost),
		))
	tracing.Inject(c, h)
	return s
}

// endRelay closes a relay span: the engine's status, the output tokens counted, and the
// error that ended the request early, if any.
func endRelay(s trace.Span, status int, outputTokens uint64, err error) {
	s.SetAttributes(
		attribute.Int("http.response.status_code", status),
		attribute.Int64("gen_ai.usage.output_tokens", int64(min(outputTokens, 1<<62))),
	)
	if err != nil {
		s.RecordError(err)
		reason := "engine_failed"
		if se := (*relay.StreamError)(nil); errors.As(err, &se) && se.Status == relay.StatusClientClosedRequest {
			reason = "client_gone"
		}
		s.SetAttributes(attribute.String("switchyard.end", reason))
	}
	if status >= 500 {
		s.SetStatus(codes.Error, "")
	}
	s.End()
}

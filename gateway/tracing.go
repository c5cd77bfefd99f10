package gateway

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/tracing"
	"github.com/switchyard/switchyard/internal/wire"
)

// OpenTelemetry spans of one routed request (docs/tracing.md): gateway.request (server,
// the caller's traceparent as parent) with children gateway.route per scheduler decision,
// gateway.attempt per upstream call (its context goes to the pylon as traceparent) and
// gateway.stream for a relayed event stream. With Deps.Tracer nil (tracing off) the
// handler's *reqTrace is nil and every method below returns at once: no span, context or
// allocation.

// Tracer is an OpenTelemetry tracer (Deps.Tracer).
type Tracer = trace.Tracer

// reqTrace is the trace of one request.
type reqTrace struct {
	tr       trace.Tracer
	ctx      context.Context // the request span's context
	root     trace.Span
	route    trace.Span // the scheduler decision in progress (nil: none)
	attempt  trace.Span // the upstream call in progress (nil: none)
	stream   trace.Span // the relayed stream (nil: none)
	attempts int
	// streamed says the request span ends with the stream (streamGuard.CloseWithError),
	// not when the handler returns.
	streamed bool
	bytes    int64
	events   int64
	lastNL   bool // the stream's last byte was a newline
	status   int  // the streamed answer's status
}

// startTrace starts the request span of ctx's request, a child of the trace context its
// headers carry; nil when tracing is off.
func (g *Gateway) startTrace(ctx *fasthttp.RequestCtx, rt *routing, algorithm string) *reqTrace {
	tr := g.deps.Tracer
	if tr == nil {
		return nil
	}
	c, span := startRequestSpan(tr, ctx, rt, algorithm)
	return &reqTrace{tr: tr, ctx: c, root: span}
}

// startRequestSpan starts a gateway.request span for ctx's request; rt is nil when the
// request was not parsed (then the span has no routing attributes).
func startRequestSpan(tr trace.Tracer, ctx *fasthttp.RequestCtx, rt *routing, algorithm string) (context.Context, trace.Span) {
	h := &ctx.Request.Header
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs,
		attribute.String("http.request.method", string(ctx.Method())),
		attribute.String("url.path", string(ctx.Path())),
	)
	if rt != nil {
		id := string(h.Peek(wire.HeaderRequestID))
		if rt.newRequestID != "" {
			id = rt.newRequestID // generated; the header has it once the request is routed
		}
		attrs = append(attrs,
			attribute.String("gen_ai.request.model", rt.model),
			attribute.String("switchyard.routing_key", rt.routingKey),
			attribute.String("switchyard.algorithm", algorithm),
			attribute.String("switchyard.request_id", id),
			attribute.Int64("switchyard.input_tokens", int64(min(rt.inputTokens, 1<<62))),
		)
	} else if id := h.Peek(wire.HeaderRequestID); len(id) > 0 {
		attrs = append(attrs, attribute.String("switchyard.request_id", string(id)))
	}
	return tr.Start(tracing.Extract(context.Background(), h), "gateway.request",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// traceRefused records the request span of a request answered he before it was routed
// (a bad request, an unknown model, a draining gateway…): a gateway.request span without
// children, with the answer's status and error code. rt is nil when the request was not
// parsed. Nothing when tracing is off or the request is not sampled.
func (g *Gateway) traceRefused(ctx *fasthttp.RequestCtx, rt *routing, he *httpError) {
	if g.deps.Tracer == nil {
		return
	}
	_, span := startRequestSpan(g.deps.Tracer, ctx, rt, "")
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("switchyard.refused", true))
		endRequestSpan(span, he.status, he.code, 0)
	}
	span.End()
}

// startRoute opens the span of one scheduler decision (the wait for a grant).
func (t *reqTrace) startRoute() {
	if t == nil {
		return
	}
	_, t.route = t.tr.Start(t.ctx, "gateway.route", trace.WithAttributes(attribute.Int("switchyard.attempt", t.attempts+1)))
}

// routed closes the decision's span with its outcome.
func (t *reqTrace) routed(out *dispatch.Outcome, algorithm string, arrival, now time.Time) {
	if t == nil || t.route == nil {
		return
	}
	s := t.route
	t.route = nil
	attrs := []attribute.KeyValue{
		attribute.String("switchyard.algorithm", algorithm),
		attribute.Float64("switchyard.since_arrival_ms", float64(now.Sub(arrival))/float64(time.Millisecond)),
	}
	switch out.Kind {
	case dispatch.OutcomeGranted:
		attrs = append(attrs,
			attribute.String("switchyard.outcome", "granted"),
			attribute.String("switchyard.backend", out.BackendID),
			attribute.String("switchyard.cluster", out.ClusterID),
			attribute.Int("switchyard.rank_depth", out.RankDepth),
			attribute.Bool("switchyard.kv_skipped", out.KVSkipped),
		)
		if out.Routing >= 0 {
			attrs = append(attrs, attribute.Float64("switchyard.routing_ms", float64(out.Routing)/float64(time.Millisecond)))
		}
		if out.HasExpected {
			attrs = append(attrs, attribute.Int64("switchyard.expected_queue_ms", int64(min(out.ExpectedQueueMs, 1<<62))))
		}
		if out.HasEstimate {
			attrs = append(attrs, attribute.Float64("switchyard.ttft_estimate_ms", float64(out.Estimate)/float64(time.Millisecond)))
		}
	case dispatch.OutcomeRejected:
		attrs = append(attrs, attribute.String("switchyard.outcome", "rejected"), attribute.String("switchyard.reason", out.Reason.String()))
		s.SetStatus(codes.Error, out.Reason.String())
	default:
		attrs = append(attrs, attribute.String("switchyard.outcome", "cancelled"))
	}
	s.SetAttributes(attrs...)
	s.End()
}

// startAttempt opens the span of one upstream call to backend b and writes its context
// to the request as traceparent (and tracestate): the pylon's span is its child.
func (t *reqTrace) startAttempt(b *fleet.Backend, h *fasthttp.RequestHeader) {
	if t == nil {
		return
	}
	t.attempts++
	c, s := t.tr.Start(t.ctx, "gateway.attempt", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.Int("switchyard.attempt", t.attempts),
		attribute.String("switchyard.backend", b.ID),
		attribute.String("switchyard.cluster", b.ClusterID),
		attribute.String("server.address", b.Client.Addr),
	))
	t.attempt = s
	tracing.Inject(c, h)
}

// attemptDone closes the upstream call's span: the pylon's status, or err when the call
// failed before one.
func (t *reqTrace) attemptDone(status int, err error) {
	if t == nil || t.attempt == nil {
		return
	}
	s := t.attempt
	t.attempt = nil
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	} else {
		s.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			s.SetStatus(codes.Error, "")
		}
	}
	s.End()
}

// startStream opens the span of a relayed event stream (the pylon answered status); the
// request span then ends with it.
func (t *reqTrace) startStream(backend string, status int) {
	if t == nil {
		return
	}
	t.status = status
	_, t.stream = t.tr.Start(t.ctx, "gateway.stream", trace.WithAttributes(attribute.String("switchyard.backend", backend)))
	t.streamed = true
}

// read counts p, the next bytes relayed to the client, and its events (blank lines).
func (t *reqTrace) read(p []byte) {
	t.bytes += int64(len(p))
	for _, c := range p {
		if c == '\n' {
			if t.lastNL {
				t.events++
			}
			t.lastNL = true
		} else if c != '\r' {
			t.lastNL = false
		}
	}
}

// streamEnded closes the stream's span and the request's. status is what the stream
// guard counts the request as (0: the answer's own status), upErr the pylon stream's
// failure and clientErr the failure to write to the client.
func (t *reqTrace) streamEnded(status int, upErr, clientErr error) {
	if t == nil || t.stream == nil {
		return
	}
	s := t.stream
	t.stream = nil
	reason, err := "completed", upErr
	switch {
	case status == fasthttp.StatusBadGateway && upErr != nil:
		reason = "upstream_failed"
	case status == fasthttp.StatusBadGateway:
		reason = "error_event"
	case status == relay.StatusClientClosedRequest:
		reason, err = "client_gone", clientErr
	case status == 0:
		status = t.status
	}
	s.SetAttributes(
		attribute.Int64("switchyard.stream.bytes", t.bytes),
		attribute.Int64("switchyard.stream.events", t.events),
		attribute.String("switchyard.stream.end", reason),
	)
	if err != nil {
		s.RecordError(err)
	}
	if status >= 500 {
		s.SetStatus(codes.Error, reason)
	}
	s.End()
	code := ""
	if reason != "completed" {
		code = streamEndCode(status)
	}
	t.endRoot(status, code)
}

// finish ends the request span when the handler returns, unless a stream carries on.
func (t *reqTrace) finish(resp *fasthttp.Response) {
	if t == nil || t.streamed {
		return
	}
	t.attemptDone(0, nil)
	status, code := resp.StatusCode(), ""
	if status > 299 && t.root.IsRecording() {
		code = upstreamErrorCode(resp.Body()) // the gateway's error body, or the pylon's
	}
	t.endRoot(status, code)
}

func (t *reqTrace) endRoot(status int, code string) {
	endRequestSpan(t.root, status, code, t.attempts)
	t.root.End()
}

// endRequestSpan sets the closing attributes of a gateway.request span: the answer's
// status, its error code ("": none) and the attempts made; a 5xx (or a client gone, 499)
// marks the span as an error.
func endRequestSpan(s trace.Span, status int, code string, attempts int) {
	s.SetAttributes(attribute.Int("http.response.status_code", status), attribute.Int("switchyard.attempts", attempts))
	if code != "" {
		s.SetAttributes(attribute.String("switchyard.error_code", code))
	}
	if status >= 500 || status == relay.StatusClientClosedRequest {
		s.SetStatus(codes.Error, code)
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/internal/relay"
)

// The access log: one `access` record per request, at info, through the gateway's logger
// (text or JSON like every other record). It is off by default: a record costs a few
// microseconds of formatting and a write to stderr under the handler's lock, which at
// thousands of requests per second is a real share of the gateway's added latency, and
// the metrics already count every request. AccessLogSample logs that share of requests
// (chosen at arrival, at random); AccessLogErrors logs, in addition, every request whose
// answer is not a 2xx. A request that is not logged costs a branch and a few copies into
// the connection's reusable record: nothing is allocated.
//
// A request is logged when its answer is complete: a buffered answer once written, an
// event stream once it has ended (its status then says how: 499 when the client went
// away, 502 when the stream broke), like the request counters (see after.go).

// accessLog is the access log's configuration.
type accessLog struct {
	sample float64 // share of requests logged whatever their answer, 0–1
	errors bool    // log every answer that is not a 2xx
	on     bool    // either, and the logger writes info records
}

func newAccessLog(cfg *Config, log *slog.Logger) accessLog {
	l := accessLog{sample: min(max(cfg.AccessLogSample, 0), 1), errors: cfg.AccessLogErrors}
	l.on = (l.sample > 0 || l.errors) && log.Enabled(context.Background(), slog.LevelInfo)
	return l
}

// pick decides at a request's arrival whether it is sampled.
func (l *accessLog) pick() bool {
	switch {
	case !l.on || l.sample <= 0:
		return false
	case l.sample >= 1:
		return true
	default:
		return rand.Float64() < l.sample
	}
}

// logs reports whether a request answered with status is written.
func (l *accessLog) logs(sampled bool, status int) bool {
	return sampled || (l.errors && (status < 200 || status > 299))
}

// accessRecord is one request's access-log record in the making, kept in its connection's
// deferred work (afterResponse) and reused: every string is owned elsewhere (the routing
// target's, the backend's, a static error code) or copied into a reused buffer.
type accessRecord struct {
	sampled     bool
	arrival     time.Time
	requestID   []byte
	model       string
	routingKey  string
	algorithm   string
	backend     string
	cluster     string
	attempts    int
	inputTokens uint64
	firstByte   time.Time // the event stream's first byte (zero: none)
	// head is when the gateway had read the head (status and headers) of the answering
	// attempt's response: the TTFT of an answer that is not an event stream (zero: none,
	// or an answer the gateway made itself).
	head   time.Time
	status int
	code   string
}

// startAccess begins the record of a routed request (after begin). rt's strings are not
// kept: the target's own are.
func (a *afterResponse) startAccess(ctx *fasthttp.RequestCtx, sampled bool, arrival time.Time, rt *routing, algorithm string) {
	if a.access == nil {
		a.access = new(accessRecord) // once per connection, kept for its next requests
	}
	r := a.access
	r.sampled, r.arrival, r.algorithm = sampled, arrival, algorithm
	r.requestID = append(r.requestID[:0], ctx.Request.Header.PeekBytes(hdrRequestID)...)
	r.model, r.routingKey = a.ts.t.Model, a.ts.t.RoutingKey
	r.backend, r.cluster, r.attempts, r.inputTokens = "", "", 0, rt.inputTokens
	r.firstByte, r.head, r.status, r.code = time.Time{}, time.Time{}, 0, ""
	a.pending |= afterAccess
}

// accessAttempt notes a grant: the request's next attempt goes to its backend.
func (a *afterResponse) accessAttempt(out *dispatch.Outcome) {
	if a.pending&afterAccess != 0 {
		a.access.backend, a.access.cluster = out.BackendID, out.ClusterID
		a.access.attempts++
		a.access.head = time.Time{}
	}
}

// accessHead notes that the attempt's response head was read at at.
func (a *afterResponse) accessHead(at time.Time) {
	if a.pending&afterAccess != 0 {
		a.access.head = at
	}
}

// accessEnd records the request's answer: its status (0: the response's) and, for an
// error, its code (code may be "": then a non-2xx upstream answer's OpenAI error body is
// read for one, when the record will be written).
func (a *afterResponse) accessEnd(g *Gateway, ctx *fasthttp.RequestCtx, status int, code string) {
	if a.pending&afterAccess == 0 {
		return
	}
	r := a.access
	if r.status = status; status == 0 {
		r.status = ctx.Response.StatusCode()
	}
	r.code = code
	streamed := ctx.Response.IsBodyStream() || ctx.Hijacked() // an event stream, relayed by fasthttp or handed off
	if code != "" || streamed {
		// The gateway's own answer (an error code of its own) has no upstream head; an
		// event stream's TTFT is its first byte (streamGuard).
		r.head = time.Time{}
	}
	if code == "" && r.status > 299 && g.access.logs(r.sampled, r.status) && !streamed {
		r.code = upstreamErrorCode(ctx.Response.Body())
	}
}

// upstreamErrorCode is the error.code of an OpenAI error body ("" when there is none).
func upstreamErrorCode(body []byte) string {
	var e errorBody
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error.Code
}

// runAccess writes the record when it is to be written.
func (a *afterResponse) runAccess(g *Gateway) {
	a.pending &^= afterAccess
	r := a.access
	if !g.access.logs(r.sampled, r.status) {
		return
	}
	g.writeAccess(r, g.deps.Now())
}

// writeAccess writes one access record.
func (g *Gateway) writeAccess(r *accessRecord, now time.Time) {
	attrs := make([]slog.Attr, 0, 13)
	attrs = append(attrs,
		slog.String("request_id", string(r.requestID)),
		slog.String("model", r.model),
		slog.String("routing_key", r.routingKey),
		slog.String("algorithm", r.algorithm),
		slog.String("backend", r.backend),
		slog.String("cluster", r.cluster),
		slog.Int("attempts", r.attempts),
		slog.Int("status", r.status),
	)
	if r.code != "" {
		attrs = append(attrs, slog.String("error_code", r.code))
	}
	if first := r.firstByte; !first.IsZero() || !r.head.IsZero() {
		if first.IsZero() {
			first = r.head
		}
		attrs = append(attrs, slog.Float64("ttft_ms", millis(first.Sub(r.arrival))))
	}
	attrs = append(attrs,
		slog.Float64("duration_ms", millis(now.Sub(r.arrival))),
		slog.Uint64("input_tokens", r.inputTokens),
	)
	g.log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 {
	return math.Round(float64(d.Microseconds())) / 1000
}

// refused records a request answered err before it was routed (an invalid request, an
// unknown model, a draining gateway): its access record (always an error) and its
// request span (tracing.go). rt is nil when the request was not parsed.
func (g *Gateway) refused(ctx *fasthttp.RequestCtx, sampled bool, arrival time.Time, rt *routing, err error) {
	if !g.access.on && g.deps.Tracer == nil {
		return
	}
	he := errorFor(err)
	g.traceRefused(ctx, rt, he)
	if !g.access.on || !g.access.logs(sampled, he.status) {
		return
	}
	r := accessRecord{arrival: arrival, status: he.status, code: he.code}
	r.requestID = ctx.Request.Header.PeekBytes(hdrRequestID)
	if rt != nil {
		r.model, r.routingKey, r.inputTokens = rt.model, rt.routingKey, rt.inputTokens
		if rt.newRequestID != "" {
			r.requestID = bytesOf(rt.newRequestID)
		}
	}
	g.writeAccess(&r, g.deps.Now())
}

// reject answers err to a request not routed, and records it.
func (g *Gateway) reject(ctx *fasthttp.RequestCtx, sampled bool, arrival time.Time, rt *routing, err error) {
	writeError(ctx, err)
	g.refused(ctx, sampled, arrival, rt, err)
}

// streamEndCode is the access log's error code of an event stream that ended with status.
func streamEndCode(status int) string {
	if status == relay.StatusClientClosedRequest {
		return "client_closed_request"
	}
	return "upstream_stream_error" // broken, or ended by the pylon's error event (the error event's code)
}

package pylon

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/internal/handoff"
	"github.com/switchyard/switchyard/internal/headerset"
	"github.com/switchyard/switchyard/internal/promtext"
	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/stats"
)

var zero = []byte("0")

// serve is the data-path handler.
func (p *Pylon) serve(ctx *fasthttp.RequestCtx) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("handler_panic", "panic", fmt.Sprint(r))
			internalError().write(ctx)
		}
	}()
	if ctx.IsGet() && string(ctx.Path()) == wire.HealthPath {
		p.health(ctx)
		return
	}
	p.proxy(ctx)
}

// serveAdmin is the admin listener's handler: /metrics, /healthz (the process runs),
// /readyz (not draining) and /debug/engine (the engine's names, metrics scrape and canaries).
func (p *Pylon) serveAdmin(ctx *fasthttp.RequestCtx) {
	if p.cfg.EnablePprof && bytes.HasPrefix(ctx.Path(), []byte("/debug/pprof/")) {
		pprofhandler.PprofHandler(ctx)
		return
	}
	switch string(ctx.Path()) {
	case "/metrics":
		ctx.SetContentType(promtext.ContentType)
		p.metrics.page().Write(ctx, p.metrics.set.WritePrometheus)
	case "/healthz":
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	case "/debug/engine":
		p.serveEngineDebug(ctx)
	case "/readyz":
		ctx.SetContentType("application/json")
		if p.draining.Load() {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetBodyString(`{"status":"draining"}`)
			return
		}
		ctx.SetBodyString(`{"status":"ready"}`)
	default:
		newProblem(fasthttp.StatusNotFound, "no such path on the admin listener").write(ctx)
	}
}

func (p *Pylon) toUpstream(ctx *fasthttp.RequestCtx, strip *headerset.Set) {
	strip.StripRequest(&ctx.Request.Header)
	ctx.Request.SetHost(p.upstreamHost)
	ctx.Request.URI().SetScheme(p.upstreamScheme)
}

// health forwards GET /health to the engine without bookkeeping (the gateway's RTT probe),
// or answers 503 at once while the engine is unresponsive (watchEngine).
func (p *Pylon) health(ctx *fasthttp.RequestCtx) {
	if p.engineSilent.Load() {
		engineUnresponsive().write(ctx)
		return
	}
	p.toUpstream(ctx, hopOnly)
	if err := p.client.DoTimeout(&ctx.Request, &ctx.Response, 5*time.Second); err != nil {
		connectFailure(p.cfg.LocalConnectFailuresRetryable).write(ctx)
		return
	}
	hopOnly.StripResponse(&ctx.Response.Header)
}

func (p *Pylon) proxy(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	var dh dataHeaders
	dh.collect(h)
	rid := dh.requestID
	if len(rid) == 0 {
		badHeader(wire.HeaderRequestID, "is required").write(ctx)
		return
	}
	modelName := dh.model
	if len(modelName) == 0 {
		badHeader(wire.HeaderModel, "is required").write(ctx)
		return
	}
	inputTokens, err := strconv.ParseUint(string(bytes.TrimSpace(dh.inputTokens)), 10, 64)
	if err != nil {
		badHeader(wire.HeaderInputTokens, "is required and must be an unsigned integer").write(ctx)
		return
	}
	var priority uint32
	if v := bytes.TrimSpace(dh.priority); len(v) > 0 {
		pr, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			badHeader(wire.HeaderPriority, "must be an unsigned 32-bit integer").write(ctx)
			return
		}
		priority = uint32(pr)
	}
	entry := p.lookup(modelName)
	var g *generation
	if entry != nil {
		g = entry.cur.Load()
	}
	if g == nil || p.draining.Load() {
		generationUnavailable(string(modelName)).write(ctx)
		return
	}
	if p.engineSilent.Load() {
		// The engine answers nothing (watchEngine): another backend should take it.
		engineUnresponsive().write(ctx)
		p.metrics.retryable(wire.RetryLocalConnectFailure, fasthttp.StatusServiceUnavailable)
		return
	}
	stream, bad := p.checkBody(ctx)
	if bad != nil {
		bad.write(ctx)
		return
	}
	var (
		expected    uint64
		hasExpected bool
	)
	if ev := bytes.TrimSpace(dh.expected); len(ev) > 0 {
		v, err := strconv.ParseUint(string(ev), 10, 64)
		expected, hasExpected = v, err == nil
	}
	var (
		gw  *gatewayState // nil: not from a gateway (or a malformed seq)
		seq uint64
	)
	if v := dh.seq; len(v) > 0 {
		// A view of the header: the id is only looked up (add copies a new one).
		if id, s, err := wire.ParseDispatchSeq(unsafe.String(unsafe.SliceData(v), len(v))); err == nil {
			gw, seq = p.gateways.add(id, ctx.Time().UnixNano()), s // fasthttp's clock read for this request
		}
	}
	id := string(rid)

	msgs := acquireCallMsgs()
	defer releaseCallMsgs(msgs)
	ch := g.replies.get()
	msgs.admitted = requestAdmitted{id: id, priority: priority, inputTokens: inputTokens, expectedMs: expected, hasExpected: hasExpected, reply: ch}
	if gw != nil {
		msgs.admitted.from = stats.Dispatch{From: gw, Seq: seq}
	}
	// The gateway's expectation of the prompt work (the rest cached) is the request's queued
	// work; malformed or absent: all of its input.
	if v := bytes.TrimSpace(dh.prefill); len(v) > 0 {
		if w, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			msgs.admitted.from.Prefill, msgs.admitted.from.HasPrefill = w, true
		}
	}
	// A request whose session's prompt is in flight on the engine waits for it (after
	// admission) and then prefills only the rest: that much is its queued work. Only a
	// streamed answer shows when its prompt is cached: a buffered one may wait for
	// another's prompt but is not waited for.
	key := dh.affinityKey
	if len(key) == 0 {
		key = dh.conversation // a plain client's conversation, named by the gateway
	}
	turn, ahead, aheadTokens := p.prompts.enter(key, inputTokens, stream)
	if ahead != nil {
		msgs.admitted.from.AtMostPrefill(inputTokens, aheadTokens)
	}
	r, ok := g.call(p.sys.Root, &msgs.admitted, ch)
	if ok {
		g.replies.put(ch)
	} else {
		msgs.lost = true
	}
	if r.unavailable {
		turn.release()
		if r.failed {
			generationFailed(g.model).write(ctx)
		} else {
			generationUnavailable(g.model).write(ctx)
		}
		return
	}
	mm := entry.metrics
	mm.decision(r.decision)
	if !r.decision.Admit() {
		turn.release()
		queueMismatch(r.decision, p.cfg.QueueMismatchRetryAfterMs).write(ctx)
		p.addLoad(&ctx.Response.Header, g, gw)
		mm.status(fasthttp.StatusTooManyRequests).Inc()
		p.metrics.retryable(wire.RetryQueueEstimateMismatch, fasthttp.StatusTooManyRequests)
		return
	}
	if gw != nil {
		gw.note(seq)
	}
	p.inflight.Add(1)
	mm.inTotal.AddInt64(int64(min(inputTokens, math.MaxInt64)))
	mm.inHist.Update(float64(inputTokens))
	if p.waitShare(ctx, g, id, r.hold) {
		// Its gateway gave up while it was held (and retried it elsewhere): it never
		// reaches the engine.
		turn.release()
		obs := requestObserver{p: p, g: g, mm: mm, id: id, start: p.now(), msgs: msgs, status: relay.StatusClientClosedRequest}
		obs.Finished(p.now(), &relay.Usage{}, nil)
		ctx.SetStatusCode(relay.StatusClientClosedRequest) // written to a closed connection
		ctx.SetConnectionClose()
		return
	}
	p.waitPrompt(ahead)

	hasPriority := len(dh.priority) > 0
	toEngine.DeleteRequest(h, dh.strip)
	ctx.Request.SetHost(p.upstreamHost)
	ctx.Request.URI().SetScheme(p.upstreamScheme)
	if p.cfg.UpstreamBackend == BackendDynamo {
		var ep uint32
		if hasPriority && priority < p.cfg.PriorityCeiling {
			ep = p.cfg.PriorityCeiling - priority
		}
		var num [10]byte
		h.SetCanonical(hdrDynamoPriority, strconv.AppendUint(num[:0], uint64(ep), 10))
		h.SetCanonical(hdrDynamoStrict, zero)
	}
	span := p.startRelay(h, g.model, id, inputTokens, stream)
	if !stream {
		obs := requestObserver{p: p, g: g, mm: mm, id: id, start: p.now(), msgs: msgs, span: span} // stays on the stack
		p.relayBuffered(ctx, &obs, gw)
		return
	}
	obs := &requestObserver{p: p, g: g, mm: mm, id: id, start: p.now(), msgs: msgs, span: span, prompt: turn}
	// The engine's answer is read into the connection's own response, which a stream
	// handed off the connection keeps (internal/handoff); ctx.Response when it cannot be.
	resp := handoff.Response(ctx, true)
	resp.Reset()
	resp.StreamBody = true
	if err := p.client.Do(&ctx.Request, resp); err != nil {
		p.upstreamFailed(ctx, obs, err, gw)
		return
	}
	if p.promptAtHeaders || resp.StatusCode() >= 300 {
		turn.release()
	}
	obs.headers(resp.StatusCode())
	p.fromUpstream(&resp.Header)
	body, _ := relay.DetachBodyStream(resp) // nil when fasthttp moved the field: said at start-up
	bs, ok := body.(interface {
		Read([]byte) (int, error)
		CloseWithError(error) error
	})
	if !ok { // the engine answered with a complete body after all
		turn.release()
		if body != nil {
			resp.SetBodyStream(body, -1) // put back as it was (not fasthttp's client stream)
		}
		obs.complete(resp.Body())
		p.addLoad(&resp.Header, g, gw)
		handoff.Move(resp, &ctx.Response)
		return
	}
	p.addLoad(&resp.Header, g, gw)
	rs := relay.NewStream(bs, obs, p.now, nil)
	if relay.IsEventStream(&resp.Header) {
		// An engine that fails mid-stream: the gateway gets an error event and a normal
		// end of the body, not a cut connection.
		rs.EndWithErrorEvent("inference engine")
	}
	if p.handoff.HandOff(ctx, resp, rs) {
		return
	}
	handoff.Move(resp, &ctx.Response)
	ctx.Response.SetBodyStream(rs, -1)
	ctx.Response.ImmediateHeaderFlush = true
}

func (p *Pylon) relayBuffered(ctx *fasthttp.RequestCtx, obs *requestObserver, gw *gatewayState) {
	if err := p.client.Do(&ctx.Request, &ctx.Response); err != nil {
		p.upstreamFailed(ctx, obs, err, gw)
		return
	}
	obs.status = ctx.Response.StatusCode()
	obs.mm.headers.Update(p.now().Sub(obs.start).Seconds())
	p.fromUpstream(&ctx.Response.Header)
	obs.complete(ctx.Response.Body())
	p.addLoad(&ctx.Response.Header, obs.g, gw)
}

// upstreamFailed answers an engine call that failed before a response (problem.go:
// upstreamFailure) and releases the request.
func (p *Pylon) upstreamFailed(ctx *fasthttp.RequestCtx, obs *requestObserver, err error, gw *gatewayState) {
	p.log.Debug("upstream_failed", "request_id", obs.id, "err", err)
	pr := upstreamFailure(err, p.engine.Aborted(), p.cfg.LocalConnectFailuresRetryable, p.engineDown)
	obs.status = pr.Status
	obs.Finished(p.now(), &relay.Usage{}, err)
	pr.write(ctx)
	if pr.retryable {
		p.metrics.retryable(pr.Reason, pr.Status)
	} else {
		p.metrics.nonRetryable(pr.Reason)
	}
	p.addLoad(&ctx.Response.Header, obs.g, gw)
}

// fromUpstream strips an engine response's hop-by-hop headers and applies the retry
// signalling, in one pass over the header: a status in RetryableStatusCodes (flagged by the
// engine's own retry header when RequireUpstreamRetryHeader) gets x-stargate-retryable:
// true with reason upstream_admission_rejected (and Retry-After as
// x-stargate-retry-after-ms); the engine's retry header is not forwarded.
func (p *Pylon) fromUpstream(h *fasthttp.ResponseHeader) {
	status := h.StatusCode()
	signalled := false
	var present headerset.Mask
	for k, v := range h.All() {
		if i, ok := p.fromEngine.Lookup(k); ok {
			present |= 1 << i
			if i == 0 && bytes.EqualFold(bytes.TrimSpace(v), []byte("true")) {
				signalled = true
			}
		}
	}
	p.fromEngine.DeleteResponse(h, present)
	if !p.retryableStatus(status) {
		if status >= 500 {
			p.metrics.nonRetryable("upstream_nonretryable_status")
		}
		return
	}
	if !signalled && p.cfg.RequireUpstreamRetryHeader {
		p.metrics.nonRetryable("missing_upstream_retry_header")
		return
	}
	h.Set(wire.HeaderRetryable, "true")
	h.Set(wire.HeaderRetryReason, wire.RetryUpstreamAdmission)
	if p.cfg.PropagateRetryAfter {
		if s, err := strconv.ParseUint(string(bytes.TrimSpace(h.Peek("Retry-After"))), 10, 32); err == nil {
			h.Set(wire.HeaderRetryAfterMs, strconv.FormatUint(s*1000, 10))
		}
	}
	p.metrics.retryable(wire.RetryUpstreamAdmission, status)
}

func (p *Pylon) retryableStatus(s int) bool {
	for _, r := range p.cfg.RetryableStatusCodes {
		if r == s {
			return true
		}
	}
	return false
}

// addLoad sets x-pylon-load for the request's model from the generation's snapshot.
func (p *Pylon) addLoad(h *fasthttp.ResponseHeader, g *generation, gw *gatewayState) {
	var buf [256]byte
	var now time.Time
	if gw != nil {
		now = p.now()
	}
	if v, ok := g.appendLoadReport(p.sys.Root, buf[:0], gw, now); ok {
		h.SetBytesV(wire.HeaderPylonLoad, v)
	}
}

// requestObserver reports one request's milestones to its generation actor and metrics.
type requestObserver struct {
	p       *Pylon
	g       *generation
	mm      *modelMetrics
	id      string
	start   time.Time
	firstAt time.Time
	status  int
	// msgs holds the acknowledged messages; valid only while the handler runs (headers
	// and complete), not in the relayed stream's FirstOutput and Finished.
	msgs *callMsgs
	span trace.Span // the relay's trace span (nil: tracing off)
	// prompt is the request's prompt in flight, released at its first output or end (nil:
	// not recorded).
	prompt *promptTurn
}

// headers reports a streamed response's headers; on return the snapshot includes them.
func (o *requestObserver) headers(status int) {
	o.status = status
	o.mm.headers.Update(o.p.now().Sub(o.start).Seconds())
	ch := o.g.replies.get()
	m := &o.msgs.started
	*m = responseStarted{id: o.id, reply: ch}
	if _, ok := o.g.call(o.p.sys.Root, m, ch); ok {
		o.g.replies.put(ch)
	} else {
		o.msgs.lost = true
	}
}

// FirstOutput implements relay.Observer.
func (o *requestObserver) FirstOutput(at time.Time) {
	o.prompt.release()
	o.firstAt = at
	o.mm.first.Update(at.Sub(o.start).Seconds())
	o.p.sys.Root.Send(o.g.pid, &firstOutput{id: o.id, at: at})
}

// Finished implements relay.Observer. A stream that ended early is counted with its
// StreamError's status: 499 when the client went away, 502/503/504 when the engine failed.
func (o *requestObserver) Finished(at time.Time, u *relay.Usage, err error) {
	o.prompt.release()
	if se := (*relay.StreamError)(nil); err != nil && errors.As(err, &se) {
		o.status = se.Status
	}
	var decode time.Duration
	if !o.firstAt.IsZero() {
		decode = at.Sub(o.firstAt)
	}
	out := o.account(at, u)
	if o.span != nil {
		endRelay(o.span, o.status, out, err)
	}
	o.p.sys.Root.Send(o.g.pid, &finished{id: o.id, at: at, outputTokens: out, decode: decode})
	o.p.inflight.Add(-1)
}

// account updates the completion metrics and returns the output token count.
func (o *requestObserver) account(at time.Time, u *relay.Usage) uint64 {
	out := u.OutputTokens()
	if u.HasUsage {
		o.mm.usage.Inc()
	} else {
		o.mm.chunks.Inc()
	}
	o.mm.outTotal.AddInt64(int64(min(out, math.MaxInt64)))
	o.mm.outHist.Update(float64(out))
	o.mm.duration.Update(at.Sub(o.start).Seconds())
	o.mm.status(o.status).Inc()
	return out
}

// complete reports a buffered (non-streamed) response: headers, output and completion at
// one instant, in one message; on return the snapshot includes the completion.
func (o *requestObserver) complete(body []byte) {
	var s relay.Scanner
	s.JSON(body)
	now := o.p.now()
	output := o.status < 300
	if output {
		o.mm.first.Update(now.Sub(o.start).Seconds())
	}
	out := o.account(now, &s.Usage)
	if o.span != nil {
		endRelay(o.span, o.status, out, nil)
	}
	ch := o.g.replies.get()
	m := &o.msgs.done
	*m = completed{id: o.id, at: now, outputTokens: out, output: output, reply: ch}
	if _, ok := o.g.call(o.p.sys.Root, m, ch); ok {
		o.g.replies.put(ch)
	} else {
		o.msgs.lost = true
	}
	o.p.inflight.Add(-1)
}

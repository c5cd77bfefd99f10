package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
	"github.com/switchyard/switchyard/gateway/retry"
	"github.com/switchyard/switchyard/internal/handoff"
	"github.com/switchyard/switchyard/internal/headerset"
	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/wire"
)

// hopByHop headers are never forwarded in either direction.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Upgrade"}

// internalRequest are caller-supplied headers the gateway strips before a pylon.
var internalRequest = []string{
	wire.HeaderRoutingMethod, wire.HeaderRetryable, wire.HeaderRetryReason, wire.HeaderRetryAfterMs,
	wire.HeaderExpectedQueueMs, wire.HeaderErrorCode, wire.HeaderDispatchSeq, wire.HeaderPylonLoad,
	wire.HeaderUpstreamRetryable, wire.HeaderClusterID, wire.HeaderInferenceServerID, wire.HeaderInferenceServerURL,
	wire.HeaderLastClusterID, wire.HeaderPrefillTokens, wire.HeaderConversation,
}

// internalResponse are pylon headers the gateway strips before the client.
var internalResponse = []string{
	wire.HeaderRetryable, wire.HeaderRetryReason, wire.HeaderRetryAfterMs, wire.HeaderExpectedQueueMs, wire.HeaderPylonLoad,
}

// Header names the gateway strips, matched ASCII case-insensitively.
var (
	strippedRequest  = headerset.New(append(slices.Clone(internalRequest), hopByHop...)...)
	strippedResponse = headerset.New(append(slices.Clone(internalResponse), hopByHop...)...)
	// pylonLoadIdx is x-pylon-load's index in strippedResponse.
	pylonLoadIdx = slices.Index(internalResponse, wire.HeaderPylonLoad)
)

// stripRequest deletes hop-by-hop and internal headers in one pass over the request's
// headers; usually none is present and nothing is deleted (nor allocated).
func stripRequest(h *fasthttp.RequestHeader) { strippedRequest.StripRequest(h) }

// responseScan is one pass over a pylon response's headers: its load report and the
// hop-by-hop and internal headers to strip before the client (the pylon's x-pylon-load is
// always there).
type responseScan struct {
	load []byte
	del  [16]string
	n    int
}

func (rs *responseScan) scan(h *fasthttp.ResponseHeader) {
	for k, v := range h.All() {
		i, ok := strippedResponse.Lookup(k)
		if !ok {
			continue
		}
		if i == pylonLoadIdx && rs.load == nil {
			rs.load = v
		}
		if rs.n < len(rs.del) {
			rs.del[rs.n] = strippedResponse.Sent(i, k)
			rs.n++
		}
	}
}

// strip deletes the headers found by scan (after the retry decision has read them).
func (rs *responseScan) strip(h *fasthttp.ResponseHeader) {
	for _, k := range rs.del[:rs.n] {
		h.Del(k)
	}
}

// Canonical (normalized) names of the headers the gateway sets on every attempt, so the
// per-request path does not normalize them again.
var (
	hdrExpectedQueueMs = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderExpectedQueueMs)
	hdrDispatchSeq     = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderDispatchSeq)
	hdrPrefillTokens   = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderPrefillTokens)
	hdrConversation    = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderConversation)
	hdrServerID        = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderInferenceServerID)
	hdrServerURL       = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderInferenceServerURL)
	hdrClusterID       = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderClusterID)
	hdrRequestID       = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderRequestID)
	hdrModel           = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderModel)
	hdrInputTokens     = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderInputTokens)
)

// streamKey marks request bodies that may ask for a streamed response.
var streamKey = []byte(`"stream"`)

// maxBufferedResponse bounds a non-streamed upstream response the gateway reads whole.
const maxBufferedResponse = 256 << 20

// cancelPoll is how often a parked request checks that its client is still connected.
const cancelPoll = 50 * time.Millisecond

// routeGrace bounds a request's wait for its scheduler beyond the longest allowed wait, so
// a scheduler that can no longer answer (stopped, or restarted after a bug) cannot hang a
// handler forever.
const routeGrace = 5 * time.Second

// attemptState is the bookkeeping of one request's attempts.
type attemptState struct {
	// after holds work deferred until the answer is written; deferred says the connection
	// runs it (otherwise the handler does before returning).
	after    *afterResponse
	deferred bool
	// retry is the request's state for the retry policy (package retry).
	retry retry.State
	// trace is the request's OpenTelemetry trace (tracing.go); nil = tracing off.
	trace *reqTrace
	// unchecked sends the next attempt without an expected queue (retry.Decision.Unchecked).
	unchecked bool
	// streamCounted says the request's in-flight count moved to its stream's guard
	// (handOver), which gives it back when the stream ends.
	streamCounted bool
}

// handleInference routes and proxies one OpenAI request.
func (g *Gateway) handleInference(ctx *fasthttp.RequestCtx) {
	arrival := g.deps.Now()
	g.metrics.infl.Inc()
	var st attemptState
	defer func() {
		if !st.streamCounted { // else the stream's guard gives the count back when it ends
			g.metrics.infl.Dec()
		}
	}()
	sampled := g.access.pick() // the access log (accesslog.go)
	if g.draining.Load() {
		g.reject(ctx, sampled, arrival, nil, fmt.Errorf("%w: not accepting new requests", ErrShuttingDown))
		return
	}
	body := ctx.PostBody()
	if len(body) > g.cfg.MaxReplayBodyBytes {
		g.reject(ctx, sampled, arrival, nil, fmt.Errorf("%w: the body exceeds the replay limit of %d bytes", ErrTooLarge, g.cfg.MaxReplayBodyBytes))
		return
	}
	rt, err := parseRouting(&ctx.Request.Header, body, g.cfg.RetryBudgetHeader, g.newRequestID)
	if err != nil {
		g.reject(ctx, sampled, arrival, nil, err)
		return
	}
	// Stream the response only when the request may ask for a stream: a plain JSON answer
	// is read whole (fewer allocations and copies), up to maxBufferedResponse.
	rt.mayStream = bytes.Contains(body, streamKey)
	r, err := g.resolve(&rt)
	if err != nil {
		g.reject(ctx, sampled, arrival, &rt, routingMethodError(err))
		return
	}
	if r.entry.RequireCacheAffinityKey && rt.affinityKey == "" {
		g.reject(ctx, sampled, arrival, &rt, fmt.Errorf("%w: %s requires the %s header", ErrBadRequest, r.entry.Algorithm, wire.HeaderCacheAffinityKey))
		return
	}
	if r.pid == nil {
		r = g.awaitTarget(r) // just started: its backend may not have registered yet
	}
	pid, ts, target := r.pid, r.ts, r.target
	if pid == nil {
		// Never registered: counted under empty labels so request-chosen model names
		// cannot grow the series set.
		err := routingError(dispatch.ReasonNoCandidates)
		g.finish(ctx, g.metrics.target(dispatch.Target{}), "", err)
		g.refused(ctx, sampled, arrival, &rt, err)
		return
	}
	h := &ctx.Request.Header
	stripRequest(h)
	if rt.newRequestID != "" {
		h.SetCanonical(hdrRequestID, bytesOf(rt.newRequestID))
	}
	if rt.modelFromBody {
		h.SetCanonical(hdrModel, bytesOf(rt.model))
	}
	if rt.estimated {
		var num [20]byte
		h.SetCanonical(hdrInputTokens, strconv.AppendUint(num[:0], rt.inputTokens, 10))
	}
	p := g.pending.Acquire(arrival)
	defer g.pending.Release(p)
	p.Entry = &r.entry // r is immutable
	p.MaxWait, p.HasMaxWait = rt.maxWait, rt.hasMaxWait
	p.Req.AffinityKey, p.Req.InputTokens, p.Req.Priority, p.Req.SLO = rt.affinityKey, rt.inputTokens, rt.priority, rt.slo
	p.Req.LastCluster = rt.lastCluster
	if r.entry.ShortestFirst {
		p.MaxOutputTokens = maxOutputTokens(body)
	}
	if r.entry.PrefixAffinity && rt.affinityKey == "" {
		p.Req.Prefix = lb.AppendPrefixHashes(p.Req.Prefix[:0], r.target.Model, promptContent(body))
		if p.Req.Session = conversationHash(body); p.Req.Session != 0 {
			// The conversation's key for prefill_wait, the backend pick and the pylon's
			// prompt wait (a plain client sends no affinity key).
			p.ConversationKey = conversationKey(p.Req.Session)
			h.SetCanonical(hdrConversation, bytesOf(p.ConversationKey))
		}
	}
	st.after, st.trace = afterFor(ctx), g.startTrace(ctx, &rt, r.entry.Algorithm.String())
	defer st.trace.finish(&ctx.Response)
	if rt.hasBudget {
		st.retry.Deadline = arrival.Add(rt.budget)
	}
	if st.deferred = st.after != nil; !st.deferred {
		st.after = new(afterResponse)
		defer st.after.run(g)
	}
	st.after.begin(g, ts, len(body))
	if g.access.on {
		st.after.startAccess(ctx, sampled, arrival, &rt, r.entry.Algorithm.String())
	}
	for {
		st.trace.startRoute()
		out := g.await(ctx, pid, p)
		if st.trace != nil {
			st.trace.routed(&out, p.Entry.Algorithm.String(), p.Arrival, g.deps.Now())
		}
		switch out.Kind {
		case dispatch.OutcomeCancelled:
			g.metrics.inc(mClientCancelled, "routing_key", target.RoutingKey, "model", target.Model)
			ctx.SetConnectionClose()
			st.after.accessEnd(g, ctx, relay.StatusClientClosedRequest, "client_cancelled")
			return
		case dispatch.OutcomeRejected:
			if d := g.decide(p, &st, retry.Outcome{Kind: retry.Rejected}); d.Exhausted {
				g.metrics.inc(mRetryExhausted, "routing_key", target.RoutingKey, "model", target.Model, "reason", d.Reason)
			}
			he := g.rejectionError(out.Reason)
			g.finish(ctx, ts, "", he)
			st.after.accessEnd(g, ctx, 0, he.code)
			return
		default:
		}
		st.after.setSelection(p.Entry.Algorithm.String(), &out)
		st.after.accessAttempt(&out)
		again, final := g.attempt(ctx, pid, p, &out, &st, &rt, ts)
		if final != nil {
			g.finish(ctx, ts, out.BackendID, final)
			if st.after.pending&afterAccess != 0 {
				st.after.accessEnd(g, ctx, 0, errorFor(final).code)
			}
			return
		}
		if !again {
			st.after.setRequest(out.BackendID, ctx.Response.StatusCode())
			st.after.accessEnd(g, ctx, 0, "")
			return
		}
	}
}

// resolved is a request's routing target resolved: its lb-config entry, scheduler and
// metric series. The last one resolved is kept (most traffic names the same few targets),
// so a repeat costs a few string comparisons instead of three map lookups.
type resolved struct {
	cfg       *lbconfig.Config
	method    string
	hasMethod bool
	target    dispatch.Target
	entry     lbconfig.Entry
	pid       *actor.PID // nil: the target was never registered (not kept)
	ts        *targetSeries
	epoch     uint64 // the directory's epoch when pid was looked up (a collection changes it)
}

func (g *Gateway) resolve(rt *routing) (*resolved, error) {
	cfg := g.lbcfg.Load()
	if r := g.lastResolved.Load(); r != nil && r.cfg == cfg && r.target.Model == rt.model && r.target.RoutingKey == rt.routingKey &&
		r.hasMethod == rt.hasMethod && r.method == rt.method && r.epoch == g.dir.Epoch() {
		if r.entry.FromExpression {
			g.countExpression(r.entry, "hit")
		}
		return r, nil
	}
	// A new target: keep copies, not views of this request's headers (see routing).
	rt.model, rt.routingKey, rt.method = strings.Clone(rt.model), strings.Clone(rt.routingKey), strings.Clone(rt.method)
	entry, err := g.resolveEntry(cfg, rt)
	if err != nil {
		return nil, err //nolint:wrapcheck // wrapped by the caller
	}
	r := &resolved{cfg: cfg, method: rt.method, hasMethod: rt.hasMethod, target: dispatch.Target{RoutingKey: rt.routingKey, Model: rt.model}, entry: entry}
	r.epoch = g.dir.Epoch() // before the lookup: a collection in between makes the next request look again
	if r.pid = g.dir.Lookup(r.target); r.pid != nil {
		r.ts = g.metrics.target(r.target)
		g.lastResolved.Store(r)
	}
	return r, nil
}

// finish writes a gateway-generated error and counts the request.
func (g *Gateway) finish(ctx *fasthttp.RequestCtx, ts *targetSeries, backend string, err error) {
	writeError(ctx, err)
	ts.request(backend, ctx.Response.StatusCode())
}

// retryPolicy is the configured retry policy (a negative count in Config: none).
func (g *Gateway) retryPolicy() retry.Policy {
	return retry.Policy{
		MaxConnectRetries: max(g.cfg.MaxConnectRetries, 0),
		MaxRequestRetries: max(g.cfg.MaxRequestRetries, 0),
		RequireSignal:     g.cfg.RequirePylonRetrySig,
	}
}

// decide asks the retry policy what to do after outcome o of p's attempt, and keeps the
// request's retry state.
func (g *Gateway) decide(p *dispatch.Pending, st *attemptState, o retry.Outcome) retry.Decision {
	st.retry.Failures = p.Failures
	d := g.retryPolicy().Decide(st.retry, o)
	st.retry = d.Next
	return d
}

// follow applies decision d to the request p after the attempt granted out: the
// reservation released, the backend failed, the next attempt's preferred or excluded
// cluster.
func (g *Gateway) follow(pid *actor.PID, p *dispatch.Pending, out *dispatch.Outcome, d *retry.Decision) {
	if d.Release {
		g.release(pid, out)
	}
	if d.Failed {
		p.Failures = d.Next.Failures
		p.FailedBackends = append(p.FailedBackends, out.BackendID)
	}
	if d.PreferCluster {
		p.PreferCluster = out.ClusterID
	}
	if d.ExcludeCluster {
		p.Req.Excluded = append(p.Req.Excluded, out.ClusterID)
	}
}

// attempt performs one upstream call on a granted backend. It returns again = true when
// the request should be routed again, or a final error to answer; otherwise the upstream
// response is in ctx.Response (streamed after the handler returns), or its event stream
// has been handed off (stream.go).
func (g *Gateway) attempt(ctx *fasthttp.RequestCtx, pid *actor.PID, p *dispatch.Pending, out *dispatch.Outcome, st *attemptState, rt *routing, ts *targetSeries) (again bool, final error) {
	t := ts.t
	b := g.fleet.Get(out.BackendID)
	if b == nil {
		d := g.decide(p, st, retry.Outcome{Kind: retry.BackendGone})
		g.follow(pid, p, out, &d)
		return d.Retry, nil
	}
	h := &ctx.Request.Header
	var num [64]byte
	if out.HasExpected && !st.unchecked {
		h.SetCanonical(hdrExpectedQueueMs, strconv.AppendUint(num[:0], out.ExpectedQueueMs, 10))
	} else if p.Failures > 0 {
		h.DelBytes(hdrExpectedQueueMs) // set by an earlier attempt (stripRequest removed the caller's)
	}
	if out.HasPrefill {
		h.SetCanonical(hdrPrefillTokens, strconv.AppendUint(num[:0], out.PrefillTokens, 10))
	} else if p.Failures > 0 {
		h.DelBytes(hdrPrefillTokens)
	}
	seq := append(append(num[:0], g.cfg.GatewayID...), '/')
	h.SetCanonical(hdrDispatchSeq, strconv.AppendUint(seq, out.Seq, 10))
	ctx.Request.SetHost(b.Client.Addr)
	ctx.Request.URI().SetScheme(schemeOf(b.Client)) // the client's own scheme is not the pylon's
	asked := rt.mayStream && asksForStream(ctx.PostBody())
	resp := handoff.Response(ctx, asked) // the connection's own when the stream may be handed off
	resp.Reset()
	resp.StreamBody = rt.mayStream
	// The first-byte deadline, kept by the connection's watchdog (see newUpstreamConns).
	deadline := g.firstByteDeadline(out, asked)
	ctx.Request.SetTimeout(deadline)
	st.trace.startAttempt(b, h)
	abandoned := b.Abandoned()
	start := g.deps.Now()
	err := b.Client.Do(&ctx.Request, resp)
	st.trace.attemptDone(resp.StatusCode(), err)
	if out.PrefillToken != 0 {
		// The response headers (or the attempt's end): the engine has cached the prompt,
		// or never will; requests of the same key waiting for it may go (prefill_wait).
		g.sys.Root.Send(pid, dispatch.PrefillDone{Key: p.SessionKey(), Token: out.PrefillToken})
	}
	if err != nil {
		ts.other(ts.backend(b.ID), mAttempts, "result", "proxy_502").Inc()
		resp.Reset()
		now := g.deps.Now()
		if errors.Is(err, fasthttp.ErrBodyTooLarge) {
			d := g.decide(p, st, retry.Outcome{Kind: retry.BodyTooLarge, At: now})
			g.follow(pid, p, out, &d)
			return false, fmt.Errorf("%w: backend %s: the response body exceeds %d bytes; ask for \"stream\": true", ErrUpstreamError, b.ID, maxBufferedResponse)
		}
		var why fleet.Failure
		why, err = transportFailure(err, now.Sub(start), deadline, g.cfg.HeadersTimeout)
		kind := retry.TransportFailure
		switch {
		case b.Abandoned() != abandoned:
			// Given up while it waited: the pylon expired, or answered no health probe
			// twice in a row (g.abandon).
			why, kind = fleet.FailUnresponsive, retry.Abandoned
			err = fmt.Errorf("%w (waited %v): %w", errAbandoned, now.Sub(start).Round(time.Millisecond), err)
			g.metrics.inc(mAbandoned)
		case why == fleet.FailFirstByteTimeout:
			kind = retry.FirstByteTimeout
		default:
		}
		d := g.decide(p, st, retry.Outcome{Kind: kind, At: now})
		g.follow(pid, p, out, &d)
		g.fleet.ReportFailure(b, why)
		if d.Retry {
			g.metrics.inc(mRetries, "routing_key", t.RoutingKey, "model", t.Model, "reason", d.Reason)
			g.log.Debug("upstream transport error; failing over", "backend", b.ID, "err", err)
			return true, nil
		}
		g.metrics.inc(mRetryExhausted, "routing_key", t.RoutingKey, "model", t.Model, "reason", d.Reason)
		return false, fmt.Errorf("%w: backend %s: %w", ErrUpstreamError, b.ID, err)
	}
	status := resp.StatusCode()
	end := g.deps.Now()
	st.after.accessHead(end) // the access log's TTFT of an answer that is not a stream
	var rs responseScan
	rs.scan(&resp.Header)
	ar := st.after
	ar.setAttempt(ts.backend(b.ID), b, status, rs.load, end, end.Sub(start))
	d := g.decide(p, st, retry.Outcome{
		Kind: retry.Response, At: end, Status: status,
		Retryable: resp.Header.Peek(wire.HeaderRetryable), RetryReason: resp.Header.Peek(wire.HeaderRetryReason),
	})
	if d.Retryable {
		// A pylon that cannot reach its engine: handled like a backend that cannot be
		// reached (its connect retries, a sibling of its cluster first).
		if d.BackendDown {
			g.fleet.ReportFailure(b, fleet.FailEngineUnreachable)
		} else {
			g.fleet.ReportSuccess(b)
		}
		if !d.Retry {
			ar.overhead = max(start.Sub(p.Arrival), 0) // this attempt's answer is final
		}
		// The load report reaches the scheduler before this request is routed again.
		ar.runAttempt(g)
		g.follow(pid, p, out, &d)
		if d.Retry {
			g.metrics.inc(mRetries, "routing_key", t.RoutingKey, "model", t.Model, "reason", d.Reason)
			if st.unchecked = d.Unchecked; d.Unchecked {
				g.metrics.inc(mUncheckedRetries, "routing_key", t.RoutingKey, "model", t.Model)
			}
			_ = resp.CloseBodyStream()
			resp.Reset()
			return true, nil
		}
		g.metrics.inc(mRetryExhausted, "routing_key", t.RoutingKey, "model", t.Model, "reason", d.Reason)
	} else {
		if !pylonFailed(resp, status) {
			g.fleet.ReportSuccess(b)
		}
		ar.overhead = max(start.Sub(p.Arrival), 0)
		if !st.deferred || resp.IsBodyStream() {
			// A stream may last minutes: its load report applies now.
			ar.runAttempt(g)
		}
	}
	rh := &resp.Header
	rs.strip(rh)
	rh.SetCanonical(hdrServerID, b.IDBytes)
	rh.SetCanonical(hdrServerURL, b.URLBytes)
	rh.SetCanonical(hdrClusterID, b.ClusterIDBytes)
	if resp.IsBodyStream() {
		// An event stream is guarded against a pylon failing mid-stream; any other body is
		// read whole (one cut short is a 502). See stream.go.
		if err := g.handOver(ctx, resp, st, ts, b, out, start); err != nil {
			return false, err
		}
	}
	if !ctx.Hijacked() {
		handoff.Move(resp, &ctx.Response) // a no-op when resp is ctx.Response
	}
	return false, nil
}

// bytesOf views s as bytes without copying; the bytes must not be modified (fasthttp's
// header setters copy them).
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// parseLoadReport parses an x-pylon-load value in place, without copying it to a string
// first. Only the model name would alias the response's header buffer: it becomes the
// request's own model string when equal (the usual case) and a copy otherwise.
func parseLoadReport(v []byte, model string) (wire.LoadReport, error) {
	r, err := wire.ParseLoadReport(unsafe.String(unsafe.SliceData(v), len(v)))
	if err != nil {
		return r, err //nolint:wrapcheck // counted, not shown
	}
	if r.Model == model {
		r.Model = model
	} else {
		r.Model = strings.Clone(r.Model)
	}
	return r, nil
}

// release drops the reservation of a dispatch that never started on its backend.
func (g *Gateway) release(pid *actor.PID, out *dispatch.Outcome) {
	g.sys.Root.Send(pid, dispatch.Release{BackendID: out.BackendID, Seq: out.Seq})
}

// await sends Route and waits for the scheduler's answer, polling the client connection
// while parked: a client that went away cancels the request before anything is dispatched.
func (g *Gateway) await(ctx *fasthttp.RequestCtx, pid *actor.PID, p *dispatch.Pending) dispatch.Outcome {
	g.sys.Root.Send(pid, dispatch.Route{P: p})
	select {
	case o := <-p.Mailbox:
		return o
	default:
	}
	t := time.NewTimer(cancelPoll)
	defer t.Stop()
	giveUp := p.Arrival.Add(dispatch.DefaultWaitCap + routeGrace)
	for {
		select {
		case o := <-p.Mailbox:
			return o
		case <-t.C:
			gone := clientGone(ctx)
			if !gone && g.deps.Now().Before(giveUp) {
				t.Reset(cancelPoll)
				continue
			}
			g.sys.Root.Send(pid, dispatch.Cancel{P: p})
			t.Reset(routeGrace)
			select {
			case o := <-p.Mailbox:
				if o.Kind == dispatch.OutcomeGranted {
					g.release(pid, &o)
					o = dispatch.Outcome{Kind: dispatch.OutcomeCancelled}
				}
				if !gone && o.Kind == dispatch.OutcomeCancelled {
					return dispatch.Outcome{Kind: dispatch.OutcomeRejected, Reason: dispatch.ReasonRoutingTimeout}
				}
				return o
			case <-t.C:
				p.Abandoned = true
				g.log.Error("scheduler did not answer; failing the request", "waited", g.deps.Now().Sub(p.Arrival).String())
				return dispatch.Outcome{Kind: dispatch.OutcomeRejected, Reason: dispatch.ReasonRoutingTimeout}
			}
		}
	}
}

// clientGone peeks the client socket without consuming bytes: EOF or an error other than
// "would block" means the client closed the connection. Beneath TLS a closing client
// usually sends a close_notify alert first: a pending alert record (type 21) counts as gone
// too (a client still waiting for its answer sends no alert).
func clientGone(ctx *fasthttp.RequestCtx) bool {
	sc, ok := ctx.Conn().(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	cc, _ := ctx.Conn().(*clientConn)
	overTLS := cc != nil && cc.overTLS()
	gone := false
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || (err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EWOULDBLOCK)) ||
			(overTLS && n == 1 && b[0] == tlsAlertRecord)
		return true
	})
	return gone
}

// tlsAlertRecord is the content type of a TLS alert record (close_notify among them).
const tlsAlertRecord = 21

// schemeOf is the URL scheme of a pylon's pool (fasthttp refuses a request whose scheme
// differs from its pool's).
func schemeOf(c *fasthttp.HostClient) string {
	if c.IsTLS {
		return "https"
	}
	return "http"
}

// probe measures one RTT: GET /health through the backend's data pool.
func (g *Gateway) probe(ctx context.Context, c *fasthttp.HostClient, backendID string) (time.Duration, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI(wire.HealthPath)
	req.SetHost(c.Addr)
	req.URI().SetScheme(schemeOf(c))
	req.Header.Set(wire.HeaderRequestID, "stargate-health-"+backendID)
	req.Header.Set(wire.HeaderModel, wire.HealthProbeModel)
	req.Header.Set(wire.HeaderInputTokens, "0")
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	start := g.deps.Now()
	if err := c.DoTimeout(req, resp, g.cfg.ProbeTimeout); err != nil {
		return 0, err
	}
	if resp.StatusCode() >= 500 {
		return 0, fmt.Errorf("%w: backend %s, status %d", fleet.ErrProbeAnswered, backendID, resp.StatusCode())
	}
	return g.deps.Now().Sub(start), nil
}

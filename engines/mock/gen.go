package mock

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/internal/echo"

	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/engines/kvcache"
	"github.com/switchyard/switchyard/engines/latency"
)

// prefixBlockBytes is the size of a prompt block hashed for the prefix cache when a
// request has no x-cache-affinity-key.
const prefixBlockBytes = 64

// prefixKey identifies a request's prompt prefix in the KV cache: either one affinity key
// or a chain of block hashes with the tokens of each block.
type prefixKey struct {
	none        bool
	affinity    bool
	key         uint64
	chain       []uint64
	blockTokens []uint64
}

// newPrefixKey derives the cache key: the affinity header when present, else hashes of
// the prompt's content in 64-byte blocks (each hash covers the whole prefix up to its
// block), with the input tokens spread over the blocks in proportion to their bytes.
func newPrefixKey(affinity []byte, model string, prefix []byte, inputTokens uint64) prefixKey {
	if len(affinity) > 0 {
		return prefixKey{affinity: true, key: xxh3.Hash(affinity)}
	}
	if len(prefix) == 0 || inputTokens == 0 {
		return prefixKey{none: true}
	}
	n := (len(prefix) + prefixBlockBytes - 1) / prefixBlockBytes
	k := prefixKey{chain: make([]uint64, n), blockTokens: make([]uint64, n)}
	h := xxh3.HashString(model)
	total := uint64(len(prefix))
	var prevTokens uint64
	for i := range n {
		end := min((i+1)*prefixBlockBytes, len(prefix))
		h = xxh3.HashSeed(prefix[i*prefixBlockBytes:end], h)
		k.chain[i] = h
		upTo := uint64(end) * inputTokens / total
		k.blockTokens[i] = upTo - prevTokens
		prevTokens = upTo
	}
	return k
}

func (k *prefixKey) peek(c *kvcache.Cache) uint64 {
	switch {
	case k.none:
		return 0
	case k.affinity:
		return c.Peek(k.key)
	default:
		return c.PeekChain(k.chain, k.blockTokens)
	}
}

func (k *prefixKey) access(c *kvcache.Cache, input uint64) kvcache.Access {
	switch {
	case k.none || c.Capacity() == 0:
		return kvcache.Access{Uncached: input}
	case k.affinity:
		return c.Access(k.key, input)
	default:
		return c.AccessChain(k.chain, k.blockTokens)
	}
}

func (k *prefixKey) commit(c *kvcache.Cache, tokens uint64) kvcache.Evicted {
	switch {
	case k.none || c.Capacity() == 0:
		return kvcache.Evicted{}
	case k.affinity:
		return c.Commit(k.key, tokens)
	default:
		return c.CommitChain(k.chain, k.blockTokens)
	}
}

// gen is one request's generation: admission, prefill, token timing, release.
type gen struct {
	e     *Engine
	req   *request
	model *modelState
	id    string
	class string
	start time.Time
	key   prefixKey

	access  kvcache.Access
	evicted kvcache.Evicted

	// legacy timing
	timer *time.Timer
	due   time.Time

	// batched timing
	seq       uint64
	worker    int
	generated atomic.Int64
	notify    chan struct{}

	emitted    int
	span       trace.Span // nil: tracing off
	slot       bool
	queued     bool // waited for a concurrency slot
	admitted   bool
	finishOnce sync.Once
}

// kvTokens is the KV a running request holds: its prompt and its output.
func (g *gen) kvTokens() int64 {
	return int64(min(g.req.inputTokens, 1<<40)) + int64(max(g.req.outputTokens, 0))
}

// admit takes a concurrency slot, waiting while the engine is full.
func (g *gen) admit() error {
	e := g.e
	if e.sem != nil {
		select {
		case e.sem <- struct{}{}:
		default:
			g.queued = true
			e.semWaiting.Add(1)
			select {
			case e.sem <- struct{}{}:
				e.semWaiting.Add(-1)
			case <-e.done:
				e.semWaiting.Add(-1)
				return errEngineClosed
			}
		}
		g.slot = true
	}
	g.admitted = true
	e.liveKV.Add(g.kvTokens())
	if e.sim == nil {
		e.legacyRunning.Add(1)
	}
	return nil
}

// prefill runs the cache lookup and the prefill, commits the prompt to the cache and
// returns when the response headers may be sent.
func (g *gen) prefill() error {
	e := g.e
	input := g.req.inputTokens
	if e.sim == nil {
		e.mu.Lock()
		g.access = g.key.access(e.caches[0], input)
		e.mu.Unlock()
		if err := g.sleepUntil(e.now().Add(e.legacy.Prefill(g.access.Uncached))); err != nil {
			return err
		}
		e.mu.Lock()
		g.evicted = g.key.commit(e.caches[0], input)
		e.mu.Unlock()
		g.due = e.now().Add(e.legacy.FirstToken(g.id))
		g.countPrefix()
		return nil
	}
	g.notify = make(chan struct{}, 1)
	e.mu.Lock()
	cached := make([]uint64, len(e.caches))
	for i, c := range e.caches {
		cached[i] = g.key.peek(c)
	}
	g.worker = e.sim.Pick(cached)
	g.access = g.key.access(e.caches[g.worker], input)
	g.seq = e.ids.Add(1)
	e.gens[g.seq] = g
	now := e.now()
	e.advanceLocked(now)
	e.sim.Submit(now, latency.Seq{
		ID: g.seq, Worker: g.worker, PrefillTokens: toInt(min(g.access.Uncached, 1<<31)), OutputTokens: g.req.outputTokens,
	})
	e.mu.Unlock()
	e.wake()
	if err := g.waitGenerated(1); err != nil {
		return err
	}
	e.mu.Lock()
	g.evicted = g.key.commit(e.caches[g.worker], input)
	e.mu.Unlock()
	g.countPrefix()
	return nil
}

func (g *gen) countPrefix() {
	m := g.model.metrics
	m.promptTokens.Add(toInt(g.req.inputTokens))
	m.prefixQueries.Add(toInt(g.req.inputTokens))
	m.prefixHits.Add(toInt(g.access.Reused))
}

// waitToken blocks until output token i (0-based) is due.
func (g *gen) waitToken(i int) error {
	if g.e.sim != nil {
		return g.waitGenerated(int64(i) + 1)
	}
	if i > 0 {
		g.due = g.due.Add(g.e.legacy.TokenGap(g.id, i))
	}
	return g.sleepUntil(g.due)
}

// emit records that token i was sent.
func (g *gen) emit(i int) {
	g.emitted = i + 1
	m := g.model.metrics
	if i == 0 {
		m.ttft.Update(g.e.now().Sub(g.start).Seconds())
	}
	m.generationTokens.Inc()
	g.e.hub.publish(g.id, g.model.name, g.req.inputTokens, u64(g.emitted), false)
}

func (g *gen) waitGenerated(n int64) error {
	for g.generated.Load() < n {
		select {
		case <-g.notify:
		case <-g.e.done:
			return errEngineClosed
		}
	}
	return nil
}

func (g *gen) sleepUntil(due time.Time) error {
	d := due.Sub(g.e.now())
	if d <= 0 {
		return nil
	}
	if g.timer == nil {
		g.timer = time.NewTimer(d)
	} else {
		g.timer.Reset(d)
	}
	select {
	case <-g.timer.C:
		return nil
	case <-g.e.done:
		return errEngineClosed
	}
}

// finish releases the request's resources and reports it; it runs once.
func (g *gen) finish() {
	g.finishOnce.Do(func() {
		e := g.e
		if g.timer != nil {
			g.timer.Stop()
		}
		if e.sim != nil && g.seq != 0 {
			e.mu.Lock()
			if _, live := e.gens[g.seq]; live {
				e.sim.Cancel(g.seq)
				delete(e.gens, g.seq)
			}
			e.mu.Unlock()
		}
		if !g.admitted {
			return
		}
		g.endSpan()
		e.liveKV.Add(-g.kvTokens())
		if g.slot {
			<-e.sem
		}
		if e.sim == nil {
			e.legacyRunning.Add(-1)
		}
		m := g.model.metrics
		m.e2e.Update(e.now().Sub(g.start).Seconds())
		if g.emitted == g.req.outputTokens {
			if g.req.finishByLength {
				m.successLength.Inc()
			} else {
				m.successStop.Inc()
			}
		}
		e.hub.publish(g.id, g.model.name, g.req.inputTokens, u64(g.emitted), true)
	})
}

// advanceLocked brings the batched model to now and wakes the requests that got tokens.
// Call with e.mu held.
func (e *Engine) advanceLocked(now time.Time) {
	e.events = e.sim.Advance(now, e.events[:0])
	for _, ev := range e.events {
		g, ok := e.gens[ev.ID]
		if !ok {
			continue
		}
		g.generated.Store(int64(ev.Generated))
		select {
		case g.notify <- struct{}{}:
		default:
		}
		if ev.Finished {
			delete(e.gens, ev.ID)
		}
	}
}

func (e *Engine) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// drive advances the batched model at the end of every step.
func (e *Engine) drive() {
	defer close(e.driverDone)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		e.mu.Lock()
		now := e.now()
		e.advanceLocked(now)
		next, busy := e.sim.Next()
		e.mu.Unlock()
		if busy {
			t.Reset(max(next.Sub(now), 0))
		} else {
			t.Stop()
		}
		select {
		case <-t.C:
		case <-e.kick:
		case <-e.done:
			return
		}
	}
}

// generate serves one OpenAI generation request. A non-nil error is answered by the caller.
func (e *Engine) generate(ctx *fasthttp.RequestCtx, ep endpoint) error {
	start := e.now()
	req, err := parseRequest(ep, ctx.PostBody())
	if err != nil {
		return err
	}
	if req.model == "" {
		req.model = e.cfg.ModelNames[0]
	}
	ms := e.model(req.model)
	if ms == nil {
		return &apiError{
			Status: fasthttp.StatusNotFound, Type: typeNotFound, Code: "model_not_found",
			Message: "the model " + echo.Quote(req.model) + " does not exist",
		}
	}
	if err := req.tokenCounts(&ctx.Request.Header, e.cfg.NumTokens); err != nil {
		return err
	}
	if ep == epEmbeddings {
		req.outputTokens = 1
		req.stream = false
	}
	id := e.requestID(&ctx.Request.Header)
	g := &gen{e: e, req: req, model: ms, id: id, class: requestClass(id), start: start}
	e.countRequest(ep, req.model, g.class)
	dropAfter, err := e.applyFaults(ms, g.class)
	if err != nil {
		return err
	}
	if ep != epEmbeddings {
		g.key = newPrefixKey(ctx.Request.Header.Peek(headerAffinityKey), req.model, req.prefix, req.inputTokens)
	} else {
		g.key = prefixKey{none: true}
	}
	if err := g.admit(); err != nil {
		return err
	}
	g.span = e.startSpan(&ctx.Request.Header, g)
	e.hub.publish(id, ms.name, 0, 0, false)
	if err := g.prefill(); err != nil {
		g.finish()
		return err
	}
	g.prefilled()
	e.hub.publish(id, ms.name, req.inputTokens, 0, false)
	if ep == epEmbeddings {
		g.emit(0)
		g.finish()
		ctx.SetContentType("application/json")
		ctx.SetBody(e.embeddingsBody(req))
		return nil
	}
	h := &ctx.Response.Header
	h.Set(headerKVHit, strconv.FormatBool(g.access.Hit))
	h.Set(headerKVReused, strconv.FormatUint(g.access.Reused, 10))
	h.Set(headerKVUncached, strconv.FormatUint(g.access.Uncached, 10))
	h.Set(headerKVEvictedEnts, strconv.FormatUint(g.evicted.Entries, 10))
	h.Set(headerKVEvictedToks, strconv.FormatUint(g.evicted.Tokens, 10))
	if g.queued {
		h.Set(headerQueued, "true")
	}
	h.Set(headerRequestID, id)
	if req.stream {
		// The prompt and its block hashes served the cache lookup and commit; an open
		// stream keeps neither, nor the request body.
		g.key, req.prefix = prefixKey{}, nil
		ctx.Request.ResetBody()
		ctx.SetContentType("text/event-stream")
		h.Set("Cache-Control", "no-cache")
		ctx.SetBodyStream(newSSEStream(g, dropAfter), -1)
		return nil
	}
	defer g.finish()
	for i := range req.outputTokens {
		if dropAfter >= 0 && i >= dropAfter {
			dropConnection(ctx)
			return nil
		}
		if err := g.waitToken(i); err != nil {
			return err
		}
		g.emit(i)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(g.completeBody(nil))
	return nil
}

// model returns the served model's state, or nil for an unknown model. Models listed
// through the discovery control are served too.
func (e *Engine) model(name string) *modelState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.models[name]
}

// requestClass tells pylon-generated requests (calibration, canary) from routed traffic.
func requestClass(id string) string {
	if strings.HasPrefix(id, "calibration-") || strings.HasPrefix(id, "canary-") {
		return classPylon
	}
	return classGateway
}

// Request classes counted by GET /test-control.
const (
	classPylon   = "pylon_generated"
	classGateway = "api_gateway"
)

func (e *Engine) countRequest(ep endpoint, model, class string) {
	e.mu.Lock()
	e.counters[counterKey{endpoint: ep.String(), model: model, class: class}]++
	e.mu.Unlock()
}

// dropConnection closes the client connection without a response.
func dropConnection(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
}

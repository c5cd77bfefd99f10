// Package stats is the pylon's per-model aggregate: request phases with per-priority prompt
// work, the sticky input-throughput distribution, the windowed output throughput, KV cache
// figures, the engine concurrency report and the sticky source labels, all combined into
// the load.Load that is published. Pure: every method takes now; nothing here reads a
// clock, logs or does I/O.
package stats

import (
	"math"
	"slices"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/pylon/admission"
)

// Phase is where a live request is.
type Phase uint8

// Request phases: Pending from admission until the engine's response headers,
// InputProcessing until the first output, OutputGeneration until completion.
const (
	Pending Phase = iota
	InputProcessing
	OutputGeneration
	numPhases
)

// String returns the metric label of p.
func (p Phase) String() string {
	switch p {
	case Pending:
		return "pending"
	case InputProcessing:
		return "input_processing"
	case OutputGeneration:
		return "output_generation"
	default:
		return "unknown"
	}
}

// Phases lists every phase (for pre-creating metric series).
var Phases = []Phase{Pending, InputProcessing, OutputGeneration}

// Source and capability labels (the last two published stats fields; sticky: once set they
// stay).
const (
	SourceChunkUsage        = "chunk_usage"
	SourceKVCacheStats      = "kv_cache_stats"
	SourceEngineStatsStream = "engine_stats_stream"
	SourceEngineMetrics     = "engine_metrics"

	CapabilityChunkUsage   = "request.output.chunk_usage"
	CapabilityKVCacheHTTP  = "machine.kv_cache.http"
	CapabilityEngineStream = "model.throughput.engine_stream"
	CapabilityEngineScrape = "machine.engine.metrics"
)

// Staleness and sampling constants: a request's engine counters are dropped after
// RequestStateTTL without an event, the output throughput is cleared after ModelStatsTTL
// without an output sample (input throughput is sticky), and an input-throughput sample
// spans at least MinSampleSpacing.
const (
	RequestStateTTL  = 300 * time.Second
	ModelStatsTTL    = 30 * time.Second
	MinSampleSpacing = 10 * time.Millisecond
)

// Options configure a new aggregate.
type Options struct {
	// FallbackConcurrency is --max-engine-concurrency (0 = none).
	FallbackConcurrency uint64
	// InitialInputTPS bootstraps the input throughput (0 = none).
	InitialInputTPS float64
	// PinInputTPS keeps InitialInputTPS as the published value.
	PinInputTPS bool
}

type request struct {
	priority    uint32
	inputTokens uint64
	work        uint64 // the prompt tokens to prefill: inputTokens, or the gateway's Dispatch.Prefill
	phase       Phase
	admittedAt  time.Time
	dispatch    Dispatch // who dispatched it, in which order (see AdmitDispatch)
	late        bool     // admitted after a later dispatch of the same gateway
	held        bool     // held back from the engine: counted in Aggregate.held (see Hold)
}

type engineRequest struct {
	processed, generated uint64
	at, genAt            time.Time
	lastSeen             time.Time
	startKnown           bool
	finished             bool
	running              bool // counted in Aggregate.streamRunning
	own                  bool // counted in Aggregate.ownInStream
}

// Aggregate is one model generation's state. Not safe for concurrent use: its owner (the
// generation actor) serializes access.
type Aggregate struct {
	model      string
	generation uint64

	reqs        map[string]request // by value: admitting a request allocates nothing
	held        uint64             // live requests held back from the engine (see Hold)
	count       [numPhases]uint64
	tokens      [numPhases]uint64
	pendingWork map[uint32]uint64 // Pending prompt work by priority

	input  Throughput
	output OutputWindow

	fallbackConc, engineConc uint64

	kvCapacity, kvUsed, kvFree uint64

	caps, sources []string

	engineReqs map[string]*engineRequest
	// streamRunning counts the engine requests the stats stream shows running: not
	// finished, and reported within the last EngineViewTTL (see setRunning).
	streamRunning uint64
	// ownInStream counts the pylon's own live requests the stream has reported running or
	// finished (see syncOwn); namesMatch says the stream has named one of them, so it names
	// requests by the pylon's request ids and the rest are on their way to the engine.
	ownInStream    uint64
	namesMatch     bool
	streamActiveAt time.Time
	lastOutputAt   time.Time

	// engine is the last scrape of the engine's own metrics, engineAt when it arrived
	// (zero: none, or it went stale; see EngineViewTTL).
	engine   EngineMetrics
	engineAt time.Time

	// latest maps a dispatching gateway to the highest dispatch seq admitted from it;
	// lateQueued counts the queued requests admitted after a later dispatch of theirs.
	latest     map[any]uint64
	lateQueued int

	// Scratch reused by Admit and the estimates (the owner serializes access).
	others       load.Load
	othersPQ     []load.PriorityEstimate
	prios        []uint32
	laterPrios   []uint32 // scratch of withoutLaterDispatches
	laterPending []uint64
}

// NewAggregate returns the aggregate of generation gen of model.
func NewAggregate(model string, gen uint64, o Options) *Aggregate {
	a := &Aggregate{
		model: model, generation: gen, reqs: make(map[string]request), pendingWork: make(map[uint32]uint64),
		engineReqs: make(map[string]*engineRequest), fallbackConc: o.FallbackConcurrency,
	}
	a.input.Bootstrap(o.InitialInputTPS, o.PinInputTPS)
	return a
}

// Model is the model id.
func (a *Aggregate) Model() string { return a.model }

// Generation is the generation number.
func (a *Aggregate) Generation() uint64 { return a.generation }

// Input exposes the input throughput distribution (read-only use).
func (a *Aggregate) Input() *Throughput { return &a.input }

// EngineLoad returns the running and waiting counts last scraped from the engine's metrics;
// ok is false when there is no such scrape, it carried no counts, or it is older than
// EngineViewTTL at now.
func (a *Aggregate) EngineLoad(now time.Time) (running, waiting uint64, ok bool) {
	if !a.engineFresh(now) || !a.engine.HasLoad {
		return 0, 0, false
	}
	return a.engine.Running, a.engine.Waiting, true
}

func (a *Aggregate) engineFresh(now time.Time) bool {
	return !a.engineAt.IsZero() && now.Sub(a.engineAt) < EngineViewTTL
}

// MaxEngineConcurrency is the effective engine limit: the engine's report when positive,
// else the CLI fallback, else 0 (unknown).
func (a *Aggregate) MaxEngineConcurrency() uint64 {
	if a.engineConc > 0 {
		return a.engineConc
	}
	return a.fallbackConc
}

// Live is the number of live requests.
func (a *Aggregate) Live() int { return len(a.reqs) }

// AtEngine is the number of live requests not held back (see Hold): relayed to the engine,
// or on their way to it.
func (a *Aggregate) AtEngine() uint64 { return uint64(len(a.reqs)) - a.held }

// Hold marks a live request as held back from the engine, so that AtEngine leaves it out;
// it stays a live, Pending request (its prompt work is queued work). It reports false for a
// request that is not live or held already.
func (a *Aggregate) Hold(id string) bool {
	r, ok := a.reqs[id]
	if !ok || r.held {
		return false
	}
	r.held = true
	a.reqs[id] = r
	a.held++
	return true
}

// Unhold ends a request's hold (it goes on to the engine); false when it was not held.
func (a *Aggregate) Unhold(id string) bool {
	r, ok := a.reqs[id]
	if !ok || !r.held {
		return false
	}
	r.held = false
	a.reqs[id] = r
	a.held--
	return true
}

// PhaseCounts returns the count and prompt work of a phase (the tokens to prefill: a
// request's input, or what its gateway expects uncached, see Dispatch).
func (a *Aggregate) PhaseCounts(p Phase) (requests, inputTokens uint64) {
	if p >= numPhases {
		return 0, 0
	}
	return a.count[p], a.tokens[p]
}

// Admit runs local queue admission for a new request against the load of every other live
// request and, unless rejected, tracks it as Pending. A request id that is already live is
// decided but not tracked twice.
func (a *Aggregate) Admit(id string, priority uint32, inputTokens, expectedMs uint64, hasExpected bool, c admission.Config, now time.Time) admission.Decision {
	return a.AdmitDispatch(id, priority, inputTokens, expectedMs, hasExpected, Dispatch{}, c, now)
}

// AdmitDispatch is Admit for a request dispatched by gateway from.From as its from.Seq-th
// dispatch to this pylon: the local estimate its expectation is compared with leaves out
// what the gateway could not count, its own dispatches that reached the pylon out of
// order (see Dispatch).
func (a *Aggregate) AdmitDispatch(id string, priority uint32, inputTokens, expectedMs uint64, hasExpected bool, from Dispatch, c admission.Config, now time.Time) admission.Decision {
	a.LoadInto(&a.others, now, a.othersPQ[:0])
	a.othersPQ = a.others.QueueEstimates[:0:cap(a.others.QueueEstimates)]
	running := a.others.RunningRequests
	a.withoutLaterDispatches(&a.others, from)
	d := admission.Decide(c, expectedMs, hasExpected, &a.others, admission.Slots{EngineRunning: running, Own: uint64(len(a.reqs))}, priority)
	if !d.Admit() {
		return d
	}
	if _, dup := a.reqs[id]; dup {
		return d
	}
	late := a.noteDispatch(from)
	work := inputTokens
	if from.HasPrefill {
		work = min(from.Prefill, inputTokens)
	}
	a.reqs[id] = request{priority: priority, inputTokens: inputTokens, work: work, phase: Pending, admittedAt: now, dispatch: from, late: late}
	if er := a.engineReqs[id]; er != nil {
		a.syncOwn(id, er)
	}
	a.count[Pending]++
	a.tokens[Pending] += work
	a.pendingWork[priority] += work
	return d
}

func (a *Aggregate) move(r *request, to Phase) {
	if r.late && r.phase < OutputGeneration && to >= OutputGeneration {
		a.lateQueued-- // see withoutLaterDispatches
	}
	if r.phase == Pending {
		a.pendingWork[r.priority] -= r.work
		if a.pendingWork[r.priority] == 0 {
			delete(a.pendingWork, r.priority)
		}
	}
	a.count[r.phase]--
	a.tokens[r.phase] -= r.work
	if to < numPhases {
		a.count[to]++
		a.tokens[to] += r.work
		if to == Pending {
			a.pendingWork[r.priority] += r.work
		}
	}
	r.phase = to
}

// ResponseStarted moves a Pending request to InputProcessing (engine headers arrived).
func (a *Aggregate) ResponseStarted(id string) {
	if r, ok := a.reqs[id]; ok && r.phase == Pending {
		a.move(&r, InputProcessing)
		a.reqs[id] = r
	}
}

// FirstOutput moves a request to OutputGeneration. When the engine stats stream is not
// feeding this model, it records the fallback input-throughput sample input tokens / time
// to first output. It reports whether a sample was recorded.
func (a *Aggregate) FirstOutput(id string, now time.Time) bool {
	r, ok := a.reqs[id]
	if !ok || r.phase == OutputGeneration {
		return false
	}
	a.move(&r, OutputGeneration)
	a.reqs[id] = r
	if a.streamFeeding(now) || r.inputTokens == 0 {
		return false
	}
	d := max(now.Sub(r.admittedAt), MinSampleSpacing)
	if a.input.Add(float64(r.inputTokens) / d.Seconds()) {
		a.label(SourceChunkUsage, CapabilityChunkUsage)
		return true
	}
	return false
}

// Finish removes a request. With outputTokens > 1 and a known first-output time (decode
// duration), and no engine stream feeding the model, it records an output throughput
// sample (outputTokens − 1) / decode time.
func (a *Aggregate) Finish(id string, outputTokens uint64, decode time.Duration, now time.Time) {
	r, ok := a.reqs[id]
	if !ok {
		return
	}
	a.move(&r, numPhases)
	if r.held {
		a.held--
	}
	delete(a.reqs, id)
	if er := a.engineReqs[id]; er != nil {
		a.syncOwn(id, er)
	}
	if !a.streamFeeding(now) && outputTokens > 1 && decode > 0 {
		a.output.Add(float64(outputTokens-1) / decode.Seconds())
		a.lastOutputAt = now
		a.label(SourceChunkUsage, CapabilityChunkUsage)
	}
}

func (a *Aggregate) streamFeeding(now time.Time) bool {
	return !a.streamActiveAt.IsZero() && now.Sub(a.streamActiveAt) < ModelStatsTTL
}

func (a *Aggregate) label(source, capability string) {
	a.sources = addSorted(a.sources, source)
	a.caps = addSorted(a.caps, capability)
}

func addSorted(s []string, v string) []string {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(slices.Clone(s), i, v)
}

// RequestEvent is one engine stats-stream event for a request: cumulative counters, and
// Finished closing the request.
type RequestEvent struct {
	RequestID       string
	TokensProcessed uint64
	TokensGenerated uint64
	Finished        bool
}

// ConcurrencyReport is a ping's max_engine_concurrency: positive overrides the CLI
// fallback, 0 withdraws the engine's value. A ping without the field sends no report.
type ConcurrencyReport struct {
	MaxEngineConcurrency uint64
}

// KVStats are the engine's KV cache figures in tokens.
type KVStats struct {
	CapacityTokens, UsedTokens, FreeTokens uint64
}

// EngineMetrics are one model's figures from one scrape of the engine's Prometheus
// /metrics: gauges as the engine reported them, counters already turned into rates by the
// scraper (a cumulative counter is never a rate by itself).
type EngineMetrics struct {
	// Running and Waiting are the engine's own request counts, over every client of the
	// engine; HasLoad is false when the engine exports neither.
	Running, Waiting uint64
	HasLoad          bool
	KVUsage          float64 // fraction 0..1 of the KV cache in use; NaN when not exported
	KVCapacityTokens uint64  // 0 when not exported (the last known capacity is kept)
	// MeanPromptTokens is the engine's mean prompt length (0 = unknown); it prices the
	// waiting requests the pylon did not relay.
	MeanPromptTokens float64
	// GenerationTPS and PromptTPS are counter rates between this scrape and the previous
	// scrape of the same engine process (0 = no sample). PromptTPS is only measured while
	// the engine had a queue in both scrapes: prefill then runs flat out.
	GenerationTPS, PromptTPS float64
	// Shared is set when other backends of the cluster front the same engine: its counts
	// then enter only the cluster-scoped fields (see LoadInto), and its rates none.
	Shared bool
}

// EngineViewTTL is how long a scrape of the engine's metrics stays part of the published
// load: a few scrape intervals, so a scraper that stopped getting answers does not pin the
// engine's last counts.
const EngineViewTTL = 5 * time.Second

// Update is the single model update type: engine stats, concurrency reports, KV figures
// and scraped metrics all travel through it, tagged with the generation they were meant
// for, so a queued update for a retired generation is dropped.
type Update struct {
	Generation  uint64
	Stats       *RequestEvent
	Concurrency *ConcurrencyReport
	KV          *KVStats
	Metrics     *EngineMetrics
}

// Apply applies u at now. It returns false (and changes nothing) when u is for another
// generation.
func (a *Aggregate) Apply(u *Update, now time.Time) bool {
	if u.Generation != a.generation {
		return false
	}
	if u.Concurrency != nil {
		a.engineConc = u.Concurrency.MaxEngineConcurrency
	}
	if u.KV != nil {
		a.kvCapacity, a.kvUsed, a.kvFree = u.KV.CapacityTokens, u.KV.UsedTokens, u.KV.FreeTokens
		a.label(SourceKVCacheStats, CapabilityKVCacheHTTP)
	}
	if u.Stats != nil {
		a.applyStats(u.Stats, now)
	}
	if u.Metrics != nil {
		a.applyMetrics(u.Metrics, now)
	}
	return true
}

func (a *Aggregate) applyStats(ev *RequestEvent, now time.Time) {
	a.streamActiveAt = now
	a.label(SourceEngineStatsStream, CapabilityEngineStream)
	er, known := a.engineReqs[ev.RequestID]
	if !known {
		er = &engineRequest{}
		a.engineReqs[ev.RequestID] = er
		er.at, er.genAt = now, now
		if r, tracked := a.reqs[ev.RequestID]; tracked {
			er.at, er.startKnown = r.admittedAt, true
		}
	}
	if er.finished {
		return
	}
	er.lastSeen = now
	if ev.TokensProcessed > er.processed {
		d := now.Sub(er.at)
		delta := float64(ev.TokensProcessed - er.processed)
		switch {
		case er.processed == 0 && er.startKnown: // first sample: clamped up to 10 ms
			a.input.Add(delta / max(d, MinSampleSpacing).Seconds())
			er.processed, er.at = ev.TokensProcessed, now
		case er.processed == 0: // unknown start: baseline only
			er.processed, er.at = ev.TokensProcessed, now
		case d >= MinSampleSpacing:
			a.input.Add(delta / d.Seconds())
			er.processed, er.at = ev.TokensProcessed, now
		default: // too soon: accumulate into the next sample
		}
	}
	if ev.TokensGenerated > er.generated {
		if d := now.Sub(er.genAt); d >= MinSampleSpacing {
			if er.generated > 0 {
				a.output.Add(float64(ev.TokensGenerated-er.generated) / d.Seconds())
				a.lastOutputAt = now
			}
			er.generated, er.genAt = ev.TokensGenerated, now
		}
	}
	if ev.Finished {
		er.finished = true
	}
	a.setRunning(ev.RequestID, er, !er.finished)
}

// setRunning counts er (the stream's request id) as running at the engine or not. The
// engine's stats stream reports every request the engine runs, those of the other backends
// that front the same engine included, so streamRunning is the engine's running count where
// the pylon's own live requests are only its share.
func (a *Aggregate) setRunning(id string, er *engineRequest, running bool) {
	switch {
	case running && !er.running:
		a.streamRunning++
	case !running && er.running:
		a.streamRunning--
	default:
	}
	er.running = running
	a.syncOwn(id, er)
}

// syncOwn counts er in ownInStream while it is one of the pylon's own live requests and the
// stream shows it running or finished. The own live requests not counted there have not
// reached the engine's stream yet (or it went silent on them): the engine's count lacks
// them, so the published running count adds them (combineEngine).
func (a *Aggregate) syncOwn(id string, er *engineRequest) {
	_, live := a.reqs[id]
	a.countOwn(er, live && (er.running || er.finished))
}

// countOwn counts er in ownInStream or not.
func (a *Aggregate) countOwn(er *engineRequest, own bool) {
	if own == er.own {
		return
	}
	er.own = own
	if own {
		a.ownInStream++
		a.namesMatch = true
	} else {
		a.ownInStream--
	}
}

func (a *Aggregate) applyMetrics(m *EngineMetrics, now time.Time) {
	a.label(SourceEngineMetrics, CapabilityEngineScrape)
	a.engine, a.engineAt = *m, now
	if m.KVCapacityTokens > 0 {
		a.kvCapacity = m.KVCapacityTokens
	}
	if a.kvCapacity > 0 {
		if !math.IsNaN(m.KVUsage) {
			a.kvUsed = uint64(math.Round(math.Max(0, math.Min(1, m.KVUsage)) * float64(a.kvCapacity)))
		}
		a.kvUsed = min(a.kvUsed, a.kvCapacity)
		a.kvFree = a.kvCapacity - a.kvUsed
	}
	if m.Shared {
		return // engine-wide rates would be counted once per backend of the cluster
	}
	if m.GenerationTPS > 0 {
		a.output.Add(m.GenerationTPS)
		a.lastOutputAt = now
	}
	if m.PromptTPS > 0 {
		a.input.Add(m.PromptTPS)
	}
}

// Sweep drops engine request state idle for RequestStateTTL, drops the engine's scraped
// counts once older than EngineViewTTL, and clears the output throughput when no output
// sample arrived for ModelStatsTTL (input throughput is sticky). It reports whether
// anything changed.
func (a *Aggregate) Sweep(now time.Time) bool {
	changed := false
	if !a.engineAt.IsZero() && !a.engineFresh(now) {
		a.engineAt = time.Time{} // the engine's counts leave the published load
		changed = true
	}
	for id, er := range a.engineReqs {
		if er.running && now.Sub(er.lastSeen) >= EngineViewTTL {
			a.setRunning(id, er, false) // no news of it: no longer counted (until its next event)
			changed = true
		}
		if now.Sub(er.lastSeen) >= RequestStateTTL || (er.finished && now.Sub(er.lastSeen) >= ModelStatsTTL) {
			a.countOwn(er, false) // a live request of the pylon's own the engine finished long ago
			delete(a.engineReqs, id)
		}
	}
	if !a.lastOutputAt.IsZero() && now.Sub(a.lastOutputAt) >= ModelStatsTTL && a.output.Mean() > 0 {
		a.output.Clear()
		changed = true
	}
	return changed
}

// Load is the published view at now (the 17 published stats fields).
func (a *Aggregate) Load(now time.Time) load.Load {
	var l load.Load
	a.LoadInto(&l, now, nil)
	return l
}

// LoadInto writes the published view at now into l without allocating when buf has room
// for the queue estimates: they are appended to buf[:0]. Capabilities and Sources share
// the aggregate's copy-on-write slices, so l stays valid after later changes.
//
// While a scrape of the engine's own metrics is fresh (EngineViewTTL), the engine's counts
// and the pylon's own are combined (see combineEngine).
func (a *Aggregate) LoadInto(l *load.Load, now time.Time, buf []load.PriorityEstimate) {
	tps := a.input.Published()
	own := a.tokens[Pending] + a.tokens[InputProcessing]
	c := a.combineEngine(now)
	*l = load.Load{
		InputTPS:                 tps,
		OutputTPS:                a.output.Mean(),
		MaxOutputTPS:             a.output.Max(),
		QueueSize:                c.queue,
		QueuedInputTokens:        own + c.extraWork,
		RunningRequests:          c.running,
		MaxEngineConcurrency:     a.MaxEngineConcurrency(),
		TotalInputTokens:         own + a.tokens[OutputGeneration] + c.extraWork,
		InputProcessingRequests:  a.count[InputProcessing],
		OutputGenerationRequests: a.count[OutputGeneration],
		KVCapacityTokens:         a.kvCapacity,
		KVUsedTokens:             a.kvUsed,
		KVFreeTokens:             a.kvFree,
		ObservedAtUnixMilli:      now.UnixMilli(),
		QueueEstimates:           a.appendQueueEstimates(buf, tps, c.extraWork),
		Capabilities:             a.caps,
		Sources:                  a.sources,
	}
}

// combined is the published running count and queue size, and the prompt work of the
// engine's waiting requests the pylon does not account itself.
type combined struct {
	running, queue, extraWork uint64
}

// combineEngine merges the engine's view with the pylon's own:
//
//   - running requests: the maximum of the pylon's live requests but those it holds back
//     from the engine (see Hold), the requests the engine's stats stream shows running
//     (streamRunning) plus the pylon's own live ones the stream has not shown yet (on their
//     way to the engine; only once the stream has named one of the pylon's requests, so
//     that a stream with its own request ids counts nothing twice), and the engine's
//     scraped running count (the pylon's count is fresher; the engine's include other
//     clients, such as the other backends in front of the same engine);
//   - queue size: the maximum of the engine's waiting count and the pylon's own queue
//     (Pending and InputProcessing requests);
//   - queued work: the pylon's prompt tokens of the requests it relayed, plus, for the
//     waiting requests beyond its own queue, the engine's mean prompt length each (the
//     pylon's mean over its live requests when the engine exports none; nothing when
//     neither is known).
//
// For an engine shared with other backends of the cluster (Shared) only the running count
// is combined: gateways sum queue sizes and queued work over a cluster's backends, and each
// of them sees the same engine, while the running count is cluster-scoped (the latest
// backend's value is used, not a sum). Without a fresh engine view it is the pylon's own
// and the stream's.
func (a *Aggregate) combineEngine(now time.Time) combined {
	c := combined{running: max(a.AtEngine(), a.streamRunning), queue: a.count[Pending] + a.count[InputProcessing]}
	if live := a.AtEngine(); a.namesMatch && live > a.ownInStream {
		c.running = max(c.running, a.streamRunning+live-a.ownInStream)
	}
	e := &a.engine
	if !e.HasLoad || !a.engineFresh(now) {
		return c
	}
	c.running = max(c.running, e.Running)
	if e.Shared || e.Waiting <= c.queue {
		return c
	}
	extra := e.Waiting - c.queue
	c.queue = e.Waiting
	mean := e.MeanPromptTokens
	if (mean <= 0 || math.IsNaN(mean)) && len(a.reqs) > 0 {
		mean = float64(a.tokens[Pending]+a.tokens[InputProcessing]+a.tokens[OutputGeneration]) / float64(len(a.reqs))
	}
	if mean > 0 && !math.IsInf(mean, 0) {
		c.extraWork = uint64(math.Min(math.Round(mean*float64(extra)), 1<<53))
	}
	return c
}

// appendQueueEstimates is the published priority map, appended to buf[:0]: for each
// priority with prompt work, ceil(cumulative work at priority ≤ p / tps × 1000).
// InputProcessing work and the engine's waiting work the pylon did not relay (extra) count
// at priority 0 (they are ahead of everyone), Pending work at its own priority. An explicit
// empty (non-nil) slice when tps is valid and nothing is queued; nil when tps is unknown.
func (a *Aggregate) appendQueueEstimates(buf []load.PriorityEstimate, tps float64, extra uint64) []load.PriorityEstimate {
	if !load.ValidTPS(tps) {
		return nil
	}
	ip := a.tokens[InputProcessing] + extra
	n := len(a.pendingWork) + 1
	out := buf[:0]
	if out == nil {
		out = make([]load.PriorityEstimate, 0, n)
	}
	prios := a.prios[:0]
	for p := range a.pendingWork {
		prios = append(prios, p)
	}
	if ip > 0 {
		if _, ok := a.pendingWork[0]; !ok {
			prios = append(prios, 0)
		}
	}
	slices.Sort(prios)
	a.prios = prios
	cum := ip
	for _, p := range prios {
		cum += a.pendingWork[p]
		out = append(out, load.PriorityEstimate{Priority: p, QueueMs: ceilMs(cum, tps)})
	}
	return out
}

func ceilMs(work uint64, tps float64) uint64 {
	v := math.Ceil(float64(work) / tps * 1000)
	if v >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(v)
}

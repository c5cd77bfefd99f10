package dispatch

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Target is a routing target: routing key × model.
type Target struct {
	RoutingKey string
	Model      string
}

// BackendView is one backend's current view for one model, as its backend actor reports
// it. Values are immutable once sent.
type BackendView struct {
	ID        string
	URL       string
	ClusterID string
	// Active is the model's advertised status (ACTIVE).
	Active bool
	// RTT is the last health-probe round trip; HasRTT is false until the first probe.
	RTT    time.Duration
	HasRTT bool
	Load   load.Load
	// SeqEcho is the highest dispatch sequence the backend had admitted from this gateway
	// when Load was observed: reservations at or below it are covered by Load.
	SeqEcho uint64
	// Seq numbers this gateway's dispatches to the backend (shared by every target).
	Seq *atomic.Uint64
	// UpdatedAt orders updates for latest-wins aggregation.
	UpdatedAt time.Time
	// Ejected says passive health took the backend out of routing (since EjectedAt); the
	// scheduler honours it within its cap (Deps.MaxEjectionPercent).
	Ejected   bool
	EjectedAt time.Time
	// SlotShare is the number of the engine's slots the backend fills, when several
	// backends front one engine (0: the whole engine; see backendState.full).
	SlotShare uint64
}

// Routable reports whether the backend can take requests: ACTIVE with an RTT. An ejected
// backend is routable but not a candidate (see Scheduler).
func (v *BackendView) Routable() bool { return v.Active && v.HasRTT }

// BackendChanged tells a scheduler that a backend's view of its model changed. It travels
// as a pointer (*BackendChanged); NewBackendChanged takes one from a pool and the scheduler
// recycles it once applied, so the per-response load report path allocates nothing.
type BackendChanged struct{ View BackendView }

var changedPool = sync.Pool{New: func() any { return new(BackendChanged) }}

// NewBackendChanged returns a pooled change message for v.
func NewBackendChanged(v *BackendView) *BackendChanged {
	m := changedPool.Get().(*BackendChanged) //nolint:forcetypeassert // the pool holds only *BackendChanged
	m.View = *v
	return m
}

func (m *BackendChanged) release() {
	m.View = BackendView{}
	changedPool.Put(m)
}

// BackendRemoved tells a scheduler that a backend left (expired, deregistered or stopped
// serving the model).
type BackendRemoved struct{ ID string }

// Route asks the scheduler to route a pending request (first attempt or retry). P is a
// pointer hand-off: the scheduler owns it until it answers on P.Mailbox (see Pending).
type Route struct{ P *Pending }

// Cancel withdraws a parked request (its client went away); the scheduler answers on the
// request's mailbox with OutcomeCancelled unless it had granted it already. P is the
// request of an earlier Route: the sender leaves it alone until the answer arrives.
type Cancel struct{ P *Pending }

// Release drops the routing reservation of a dispatch that never started on the backend
// (queue_estimate_mismatch, transport failure).
type Release struct {
	BackendID string
	Seq       uint64
}

// IgnoreDeadLetterLogging implements actor.IgnoreDeadLetterLogging. A request may send
// Route, Cancel or Release to a scheduler just collected: such dead letters are expected
// (a Route is answered, see Directory), so protoactor does not log them.
func (Route) IgnoreDeadLetterLogging() {}

// IgnoreDeadLetterLogging implements actor.IgnoreDeadLetterLogging.
func (Cancel) IgnoreDeadLetterLogging() {}

// IgnoreDeadLetterLogging implements actor.IgnoreDeadLetterLogging.
func (Release) IgnoreDeadLetterLogging() {}

// OutcomeKind classifies a scheduler's answer to a pending request.
type OutcomeKind uint8

// Outcomes.
const (
	OutcomeGranted OutcomeKind = iota + 1
	OutcomeRejected
	OutcomeCancelled
)

// Outcome is the scheduler's answer, delivered on the pending request's mailbox.
type Outcome struct {
	Kind OutcomeKind
	// Granted
	BackendID       string
	ClusterID       string
	Seq             uint64
	ExpectedQueueMs uint64
	HasExpected     bool
	RankDepth       int
	KVSkipped       bool
	// Session is how last_cluster_affinity classified the request's session.
	Session lb.SessionState
	// PrefillTokens is how many of the request's input tokens the decision expects the
	// backend to prefill (fewer than all when it priced the prefix as cached there; see
	// lb.Decision.PrefillScale); HasPrefill is false when it expects all of them. The
	// gateway tells the pylon (x-switchyard-prefill-tokens) so that the pylon's queue
	// counts the work the engine will do, as the gateway's reservation does.
	PrefillTokens uint64
	HasPrefill    bool
	// PrefillToken, when not 0, asks the handler to send PrefillDone{key, PrefillToken}
	// once the attempt has its response headers or has ended (prefill_wait).
	PrefillToken uint64
	// TTFT is the backend's estimated time to first byte for this request (RTT + queue +
	// prefill); HasTTFT is false when it is unknown (no usable throughput). InputTPS is the
	// backend's input throughput the estimate used.
	TTFT     time.Duration
	HasTTFT  bool
	InputTPS float64
	// Estimate is the routing decision's TTFT estimate of the granted cluster: the
	// balancer's own (with whatever prefill discount it applied), or RTT + queue + full
	// prefill for a balancer that does not estimate, with the cluster's learned correction
	// when the request's algorithm applies it. HasEstimate is false when it is not a
	// positive finite time. Feedback takes the attempt's observed time to first byte back
	// to the correction.
	Estimate    time.Duration
	HasEstimate bool
	Feedback    Feedback
	// Routing is the time from arrival to this first grant (< 0 for a retry's grant).
	Routing time.Duration
	// Reason says why the request was rejected (OutcomeRejected only).
	Reason Reason
}

// Reason says why a request was not routed. Its String is the stable name the gateway
// counts rejections under (the reason label of routing_rejections_total); the gateway's
// error table (gateway/errors.go) maps each to its HTTP answer. This package knows nothing
// of HTTP.
type Reason uint8

// Rejection reasons.
const (
	// ReasonNone is the zero value: not a rejection.
	ReasonNone Reason = iota
	// ReasonNoCandidates: the target has no backend at all, on a first attempt.
	ReasonNoCandidates
	// ReasonNoEligibleBackend: no backend is left for a request that already failed on one
	// (the target has none any more, or every candidate is excluded by earlier failures).
	ReasonNoEligibleBackend
	// ReasonUnavailable: the balancer found no candidate able to serve (none routable, or
	// none meeting the request's constraints) and the request could not wait.
	ReasonUnavailable
	// ReasonCapacityUnavailable: every eligible candidate is at capacity and the request
	// could not (or could no longer) wait for a slot.
	ReasonCapacityUnavailable
	// ReasonInputWorkLimit: the request's prompt exceeds the input-work admission limit.
	ReasonInputWorkLimit
	// ReasonInputWorkCapacity: the fleet's input-work admission capacity is used up.
	ReasonInputWorkCapacity
	// ReasonInvalidLBConfig: the request's algorithm definition could not be instantiated.
	ReasonInvalidLBConfig
	// ReasonShuttingDown: the scheduler stopped because the gateway is shutting down.
	ReasonShuttingDown
	// ReasonRoutingTimeout: the scheduler did not answer in time (the gateway's own
	// verdict while waiting; a parked request past its wait that is never woken).
	ReasonRoutingTimeout
	// ReasonSchedulerFailed: the target's scheduler failed (a panic) while it held the
	// request; the request was not routed, and a new attempt is routed by a fresh scheduler.
	ReasonSchedulerFailed

	// NumReasons is the number of reasons, ReasonNone included.
	NumReasons
)

var reasonNames = [NumReasons]string{
	ReasonNone:                "",
	ReasonNoCandidates:        "no_eligible_candidates",
	ReasonNoEligibleBackend:   "no_eligible_backend",
	ReasonUnavailable:         "routing_unavailable",
	ReasonCapacityUnavailable: "routing_capacity_unavailable",
	ReasonInputWorkLimit:      "input_work_limit_exceeded",
	ReasonInputWorkCapacity:   "input_work_capacity_unavailable",
	ReasonInvalidLBConfig:     "invalid_lb_config",
	ReasonShuttingDown:        "shutting_down",
	ReasonRoutingTimeout:      "routing_timeout",
	ReasonSchedulerFailed:     "scheduler_failed",
}

// String returns the reason's stable snake_case name.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Pending is one request's routing state: the request's channel-based actor. The handler
// goroutine owns it between attempts; the scheduler owns it from Route until it answers on
// Mailbox (exactly once per Route).
type Pending struct {
	Arrival time.Time
	Req     lb.Request
	// Entry is the request's algorithm definition; it must not change once routed (the
	// scheduler recognises a repeat by the pointer).
	Entry *lbconfig.Entry
	// MaxWait is x-max-wait-ms (capped); HasMaxWait says whether the header was sent.
	MaxWait    time.Duration
	HasMaxWait bool
	// FailedBackends already failed for this request; PreferCluster asks for a sibling
	// backend of that cluster first (after queue_estimate_mismatch).
	FailedBackends []string
	PreferCluster  string
	// Failures counts failed attempts (for 404 vs 503 classification).
	Failures int
	// ConversationKey names a plain client's conversation (no affinity key) for the
	// session-keyed rules: prefill_wait and the backend pick within a cluster. Blank:
	// none.
	ConversationKey string
	// MaxOutputTokens is the request's output bound (its body's max_tokens or a
	// synonym); 0: none named. With capacity_wait_order "shortest" it sizes the request's
	// work (see Work).
	MaxOutputTokens uint64
	// Mailbox receives exactly one Outcome per Route.
	Mailbox chan Outcome

	// Abandoned is set by a handler that stopped waiting for an answer to a Route: the
	// scheduler may still answer, so the request must not be recycled.
	Abandoned bool

	// scheduler-owned
	parked     bool // in the park heap (a cancelled entry stays in the heap, skipped lazily)
	everParked bool // was parked at least once: the heap may still point at it
	routed     bool // a selection was recorded (routing duration observed once)
	// behind is the decision that parked the request behind its key's prompt in flight
	// (prefill_wait), taken again once that prompt is cached (see grantBehind).
	behind       lb.Decision
	behindTarget string
	// decideFrom, when after Arrival, is where the balancer's clock starts instead: the
	// moment the session's prompt in flight p was priced behind is (expected) cached
	// (behindPrefill).
	decideFrom time.Time
}

// decisionElapsed is the time the balancer counts p as having waited at now (see
// decideFrom).
func (p *Pending) decisionElapsed(now time.Time) time.Duration {
	if p.decideFrom.After(p.Arrival) {
		return max(now.Sub(p.decideFrom), 0)
	}
	return now.Sub(p.Arrival)
}

// Work is the request's size for capacity_wait_order "shortest": its input tokens plus
// its output bound, a request without one counting as longer than any with one.
func (p *Pending) Work() uint64 {
	out := p.MaxOutputTokens
	if out == 0 {
		out = unboundedOutput
	}
	return p.Req.InputTokens + out
}

// unboundedOutput is the output size Work gives a request that names no bound: beyond any
// real max_tokens, with room left for the input tokens.
const unboundedOutput = 1 << 40

// NewPending returns a pending request with a one-slot mailbox.
func NewPending(arrival time.Time) *Pending {
	return &Pending{Arrival: arrival, Mailbox: make(chan Outcome, 1)}
}

// PendingPool recycles pending requests. Keep one per gateway, not one per process: a
// pending request's mailbox belongs to the goroutines that made it (in tests, a synctest
// bubble), so it must not cross to another gateway.
type PendingPool struct{ pool sync.Pool }

// Acquire returns a pending request with a one-slot mailbox; hand it back with Release
// once its handler is done.
func (pp *PendingPool) Acquire(arrival time.Time) *Pending {
	if p, ok := pp.pool.Get().(*Pending); ok {
		p.Arrival = arrival
		return p
	}
	return NewPending(arrival)
}

// Release recycles p after its handler has received every answer. A request the scheduler
// ever parked is left to the garbage collector instead: a cancelled entry of the park heap
// may still point at it until it is popped.
func (pp *PendingPool) Release(p *Pending) {
	if p.everParked || p.Abandoned || len(p.Mailbox) > 0 {
		return
	}
	clear(p.Req.Excluded)
	clear(p.FailedBackends)
	*p = Pending{Mailbox: p.Mailbox, Req: lb.Request{Excluded: p.Req.Excluded[:0], Prefix: p.Req.Prefix[:0]}, FailedBackends: p.FailedBackends[:0]}
	pp.pool.Put(p)
}

// SessionKey is the key of the request's session for prefill_wait and the backend pick
// within a cluster: its affinity key, else its ConversationKey; blank when neither.
func (p *Pending) SessionKey() string {
	if p.Req.AffinityKey != "" {
		return p.Req.AffinityKey
	}
	return p.ConversationKey
}

func (p *Pending) backendFailed(id string) bool {
	for _, f := range p.FailedBackends {
		if f == id {
			return true
		}
	}
	return false
}

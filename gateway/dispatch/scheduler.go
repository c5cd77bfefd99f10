package dispatch

import (
	"container/heap"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
	"github.com/switchyard/switchyard/internal/wire"
)

// Timing rules of the routing loop.
const (
	// MaxPark is the safety net of Wait decisions: no request waiting for a bucket or the
	// affinity hold sleeps longer without a re-check.
	MaxPark = 25 * time.Millisecond
	// DefaultWaitCap bounds waiting without x-max-wait-ms (and caps the header).
	DefaultWaitCap = wire.MaxWaitMs * time.Millisecond
	// ReservationTTL drops reservations no report ever covered.
	ReservationTTL = 30 * time.Second
)

// Observer receives the scheduler's routing events (metrics); implementations must be
// cheap and safe for concurrent use. Selections are counted by the requests themselves
// from their Outcome (after the answer is written, off the scheduler).
type Observer interface {
	Rejected(t Target, r Reason)
	Parked(t Target, delta int)
}

// Deps are the scheduler's dependencies.
type Deps struct {
	Now      func() time.Time
	Logger   *slog.Logger
	Observer Observer
	Seed     uint64
	// CollectGrace is how long a routing target keeps its scheduler after its last
	// backend detached (see Directory); 0 means DefaultCollectGrace, a negative value
	// collects at once.
	CollectGrace time.Duration
	// ReleaseAfter is how many targets collected in one burst make the directory hand the
	// freed memory back to the operating system at the end of the burst (see
	// Directory.sweep); 0 means DefaultReleaseAfter (10 000), a negative value never.
	ReleaseAfter int
	// MaxEjectionPercent caps the backends passive health may take out of one target's
	// candidates at once: at most this percent of its routable backends, and always at
	// least one; 0 (or 100 and more) lets every backend be ejected. Over the cap, the
	// backends ejected first stay out and the others stay candidates.
	MaxEjectionPercent int
	// ClusterBackends is how a request picks the backend of its chosen cluster:
	// ClusterBackendsSpread ("" too) or ClusterBackendsLead (see pickBackend).
	ClusterBackends string
}

// The choices of a backend within a cluster (Deps.ClusterBackends).
const (
	// ClusterBackendsLead sends every request of a cluster through one of its backends,
	// the same on every gateway replica: the first by rendezvous hashing on the cluster
	// id among those that have not failed for the request. A cluster's backends front
	// one engine, so the lead's pylon sees every request on its way there and its
	// admission holds the engine to its concurrency; the others take over when it fails
	// or leaves.
	ClusterBackendsLead = "lead"
	// ClusterBackendsSpread spreads a cluster's requests over its backends: a keyed
	// request to the one its session key ranks first (a sibling with a free slot when
	// that one is full), others round-robin.
	ClusterBackendsSpread = "spread"
)

type reservation struct {
	seq      uint64
	tokens   uint64
	priority uint32
	at       time.Time
}

type backendState struct {
	view         BackendView
	reservations []reservation
	// echoes is set once the backend has echoed a dispatch sequence: from then on only an
	// echo covering a reservation drops it.
	echoes bool
	// out says the backend is ejected and the cap lets it stay out of the candidates.
	out bool
	// lastTPS is the last valid input throughput the backend reported (0 = none).
	lastTPS float64
	// peakTPS is the greatest valid input throughput it reported since it registered (the
	// pulsar ranking's default weight).
	peakTPS float64
}

type clusterInfo struct {
	backends []string // routable backend ids, sorted
	lead     []string // with ClusterBackendsLead: the backends in lead order (lb.LeadOrder)
	next     uint64   // round-robin counter
	seen     bool     // present in the last snapshot
	idx      int      // index of the cluster's candidate in the snapshot
	stale    bool     // listed in Scheduler.stale
	// ttft is the cluster's TTFT correction; members hashes the backends it learned about
	// (a change of backends resets it).
	ttft    *ttftCell
	members uint64
}

// Scheduler is the actor of one routing target: it owns the candidate snapshot, the
// routing reservations, the balancer instances and the parked requests.
type Scheduler struct {
	target   Target
	deps     Deps
	self     *actor.PID
	backends map[string]*backendState
	clusters map[string]*clusterInfo
	snapshot *lb.Snapshot
	snapBuf  lb.Snapshot    // reused by snap: rebuilt in place after every change
	cands    []lb.Candidate // reused candidate slice of snapBuf
	// cellQueue queues the correction cells whose factors changed; full and cached are the
	// corrections correct gave the snapshot (drained and touched: its scratch).
	cellQueue    changedCells
	drained      []*ttftCell
	touched      []int
	full, cached pooledFactors
	resv         []reservation // scratch for aggregation
	dirty        bool          // the candidate set changed: rebuild the snapshot whole
	stale        []string      // clusters whose candidate must be re-aggregated in place
	builtAt      time.Time     // last whole rebuild (which also expires old reservations)
	order        []string      // backend ids in (cluster, id) order
	group        []lb.Backend  // scratch for aggregation
	balancers    map[lbconfig.Entry]lb.Balancer
	lastEntry    lbconfig.Entry
	lastEntryPtr *lbconfig.Entry
	lastBalancer lb.Balancer
	rng          *rand.Rand
	parked       parkHeap
	alarm        *actors.Alarm
	reeval       bool
	// exprs are the definitions of the balancers routing expressions made, most recent
	// first: a target keeps at most MaxExpressionBalancers of them.
	exprs []lbconfig.Entry
	// parkedCount counts live parked requests (the heap may hold cancelled entries).
	parkedCount int
	// sys is the actor system; life is what the actor keeps across restarts (failure.go).
	sys  *actor.ActorSystem
	life *life
	// trying is the request being routed, until it is answered or parked; batch the
	// parked requests a re-evaluation has yet to route; held the requests that arrived
	// while restoring (the instance waits for its backends' views after a restart). A
	// failure answers them all (failure.go).
	trying    *Pending
	batch     []*Pending
	held      []*Pending
	restoring bool
	// tpsMedian is the median valid input throughput of the target's backends (0 = none),
	// recomputed with each whole rebuild: a backend without a measured throughput (new,
	// restarted) is estimated with it rather than as never finishing any prefill.
	tpsMedian  float64
	tpsScratch []float64
	ejScratch  []*backendState
	// cells are the candidates' TTFT corrections, index for index; corrected says the
	// snapshot's candidates may carry a correction (see correct).
	cells     []*ttftCell
	corrected bool
	// prefills are the prompts in flight per affinity key (prefill.go).
	prefills     map[string]prefillState
	prefillToken uint64
}

// reevaluate asks the scheduler to re-try its parked requests (coalesced).
type reevaluate struct{}

// ResetBalancers replaces the target's balancer state: the balancer instances of
// definitions Config no longer has for the target's model (and those routing expressions
// made) are dropped, and the next request of such a definition starts a new one
// (round-robin restarts at the first cluster; affinity caches, session memories and
// prefix indexes start empty); a nil Config drops every instance. Instances of unchanged
// definitions, candidates, reservations and parked requests are kept. The gateway sends
// it to every target with the new configuration when the lb-config is reloaded.
type ResetBalancers struct {
	Config *lbconfig.Config
}

// newScheduler returns a new instance of target's scheduler (the Directory spawns it).
func newScheduler(target Target, deps Deps) *Scheduler {
	s := &Scheduler{
		target:    target,
		deps:      deps,
		backends:  map[string]*backendState{},
		clusters:  map[string]*clusterInfo{},
		balancers: map[lbconfig.Entry]lb.Balancer{},
		prefills:  map[string]prefillState{},
		rng:       rand.New(rand.NewPCG(deps.Seed, hashTarget(target))),
		dirty:     true,
	}
	return s
}

// hashTarget seeds each target's randomness differently (and reproducibly).
func hashTarget(t Target) uint64 { return xxh3.HashString(t.RoutingKey + "\x00" + t.Model) }

// Receive implements actor.Actor.
func (s *Scheduler) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		s.self, s.sys = c.Self(), c.ActorSystem()
		s.life.self, s.life.sys = s.self, s.sys
		s.alarm = actors.NewAlarm(c.ActorSystem().Root, s.self)
		if s.restoring {
			s.restore(c)
		}
	case *actor.Restarting:
		s.alarm.Stop()
	case *actor.Stopping:
		s.alarm.Stop()
		s.rejectAll(c)
	case *actor.Stopped:
		s.life.stopped = true
		if !s.life.retired {
			s.life.dir.lost(s.life)
		}
	case Route:
		if s.restoring {
			s.held = append(s.held, m.P)
			break
		}
		s.route(m.P)
	case restored:
		s.applyRestored(c, m)
	case Cancel:
		if m.P.parked {
			m.P.parked = false
			s.parkedCount--
			s.deps.Observer.Parked(s.target, -1)
			m.P.Mailbox <- Outcome{Kind: OutcomeCancelled}
		}
	case *BackendChanged:
		s.applyView(&m.View)
		m.release()
		s.refreshNow()
		s.changed(c)
	case BackendRemoved:
		if _, ok := s.backends[m.ID]; ok {
			delete(s.backends, m.ID)
			s.order = s.order[:0]
			s.dirty = true
			s.changed(c)
		}
	case PrefillDone:
		if s.prefillDone(m) {
			s.changed(c)
		}
	case Release:
		if b, ok := s.backends[m.BackendID]; ok {
			b.reservations = slices.DeleteFunc(b.reservations, func(r reservation) bool { return r.seq == m.Seq })
			s.touch(&b.view)
			s.refreshNow()
			s.changed(c)
		}
	case stateRequest:
		c.Respond(s.stateNow())
	case reevaluate:
		s.reeval = false
		s.retryParked(false)
	case actors.Tick:
		s.alarm.Fired()
		s.retryParked(true)
	case collected:
		s.retire(c)
	case ResetBalancers:
		s.resetBalancers(m.Config)
	default:
	}
	s.armAlarm()
}

// route routes p (a Route's request).
func (s *Scheduler) route(p *Pending) {
	p.Req.Excluded = slices.Clip(p.Req.Excluded)
	s.try(p)
}

// retire ends a collected scheduler: its parked requests get the answer of a target
// without backends, then it stops (Routes that reach it from now on are answered by the
// Directory's dead-letter handler, the same way).
func (s *Scheduler) retire(c actor.Context) {
	s.life.retired = true
	clear(s.backends)
	s.order, s.dirty = s.order[:0], true
	s.retryParked(false)
	c.Stop(s.self)
}

// changed schedules one re-evaluation of the parked requests (event-driven wake-up).
func (s *Scheduler) changed(c actor.Context) {
	if s.parkedCount > 0 && !s.reeval {
		s.reeval = true
		c.Send(s.self, reevaluate{})
	}
}

func (s *Scheduler) applyView(v *BackendView) {
	b, ok := s.backends[v.ID]
	if !ok {
		b = &backendState{}
		s.backends[v.ID] = b
		s.order = s.order[:0]
	}
	if !ok || b.view.Routable() != v.Routable() || b.view.ClusterID != v.ClusterID || b.view.Ejected != v.Ejected {
		s.dirty = true // the candidate set or the order changes: rebuild it whole
	}
	if load.ValidTPS(v.Load.InputTPS) {
		b.lastTPS = v.Load.InputTPS
		b.peakTPS = max(b.peakTPS, v.Load.InputTPS)
	}
	b.view = *v
	b.echoes = b.echoes || v.SeqEcho > 0
	if !b.echoes {
		// A backend that does not echo dispatch sequences (an older pylon, an engine
		// registered directly): the reference rule, every update covers the reservations
		// made before it.
		b.reservations = slices.DeleteFunc(b.reservations, func(r reservation) bool { return !r.at.After(v.UpdatedAt) })
	} else {
		b.reservations = slices.DeleteFunc(b.reservations, func(r reservation) bool { return r.seq <= v.SeqEcho })
	}
	s.touch(v)
}

// touch marks the cluster of a routable backend whose load or reservations changed: the
// next snapshot re-aggregates that cluster's candidate in place instead of rebuilding every
// candidate (a load report arrives with every pylon response).
func (s *Scheduler) touch(v *BackendView) {
	if s.dirty || !v.Routable() {
		return
	}
	info := s.clusters[v.ClusterID]
	if info == nil {
		s.dirty = true
		return
	}
	if !info.stale {
		info.stale = true
		s.stale = append(s.stale, v.ClusterID)
	}
}

// balancer returns the instance for entry e (per-target state, created on first use).
func (s *Scheduler) balancer(ep *lbconfig.Entry) (lb.Balancer, error) {
	// Nearly every request of a target uses the same entry: compare with the last one
	// (by pointer, then by value) before hashing the whole entry as a map key.
	if s.lastBalancer != nil && ep == s.lastEntryPtr {
		return s.lastBalancer, nil
	}
	e := *ep
	e.Name = ""
	if s.lastBalancer != nil && e == s.lastEntry {
		s.lastEntryPtr = ep
		return s.lastBalancer, nil
	}
	b, ok := s.balancers[e]
	if !ok {
		var err error
		if b, err = lb.New(e, s.rng); err != nil {
			return nil, err
		}
		s.balancers[e] = b
	}
	if e.FromExpression {
		s.recentExpression(e)
	}
	s.lastEntry, s.lastEntryPtr, s.lastBalancer = e, ep, b
	return b, nil
}

// MaxExpressionBalancers is how many balancers made by routing expressions (per-request
// settings) a target keeps: those of its most recent distinct expressions. An older
// expression's balancer is dropped, and its next request starts a fresh one.
const MaxExpressionBalancers = 2

// recentExpression makes e the target's most recent expression definition, dropping the
// balancer of the least recent one beyond MaxExpressionBalancers.
func (s *Scheduler) recentExpression(e lbconfig.Entry) {
	if i := slices.Index(s.exprs, e); i >= 0 {
		s.exprs = slices.Delete(s.exprs, i, i+1)
	}
	s.exprs = slices.Insert(s.exprs, 0, e)
	if len(s.exprs) > MaxExpressionBalancers {
		delete(s.balancers, s.exprs[len(s.exprs)-1])
		s.exprs = s.exprs[:MaxExpressionBalancers]
	}
}

// resetBalancers drops the balancer instances cfg does not keep (see ResetBalancers).
func (s *Scheduler) resetBalancers(cfg *lbconfig.Config) {
	if cfg == nil {
		clear(s.balancers)
	} else {
		keep := cfg.Entries(s.target.Model)
		for e := range s.balancers {
			if !slices.ContainsFunc(keep, func(k lbconfig.Entry) bool { return k.SameSettings(e) }) {
				delete(s.balancers, e)
			}
		}
	}
	s.exprs = s.exprs[:0]
	s.lastEntry, s.lastEntryPtr, s.lastBalancer = lbconfig.Entry{}, nil, nil
}

// try runs the routing loop for p once: grant, park or reject (docs/gateway.md). The
// balancer is looked up (and created on first use) only once there are candidates: a
// target without any holds no balancer state.
func (s *Scheduler) try(p *Pending) {
	s.trying = p
	now := s.deps.Now()
	elapsed := now.Sub(p.Arrival)
	var bal lb.Balancer
	for {
		if len(s.backends) == 0 {
			s.reject(p, noCandidates(p))
			return
		}
		snap := s.snap(now)
		if len(snap.Candidates) == 0 {
			s.unavailable(p, now, lb.Unavailable(lb.ReasonNoCandidates))
			return
		}
		if bal == nil {
			var err error
			if bal, err = s.balancer(p.Entry); err != nil {
				s.reject(p, ReasonInvalidLBConfig)
				return
			}
		}
		if p.Entry.HasMaxInputWork {
			switch lb.Admit(snap, &p.Req, *p.Entry) {
			case lb.InputWorkLimitExceeded:
				s.reject(p, ReasonInputWorkLimit)
				return
			case lb.InputWorkCapacityUnavailable:
				s.reject(p, ReasonInputWorkCapacity)
				return
			default:
			}
		}
		s.correct(snap, p.Entry.TTFTCorrection)
		// Sibling first (after a queue mismatch or a failed backend), but not into a
		// cluster known to be full: its backends front one engine, and pylons that see
		// its stats stream each report its whole running count, so the latest report
		// (the refusing pylon's own, applied before this retry) or a full sibling tells
		// of the same full engine. The cluster is then left out and the balancer compares
		// the others.
		if p.PreferCluster != "" {
			c := p.PreferCluster
			p.PreferCluster = ""
			if i := slices.IndexFunc(snap.Candidates, func(cand lb.Candidate) bool { return cand.ClusterID == c }); i >= 0 && !snap.Candidates[i].Load.Full() {
				if id, ok := s.pickBackend(c, p); ok && !s.backendFull(id) {
					s.grant(p, id, &snap.Candidates[i], lb.Selected(i, 1), elapsed)
					return
				}
			}
			p.Req.Excluded = append(p.Req.Excluded, c)
		}
		p.Req.At = now
		if s.grantBehind(p, snap, elapsed, p.Entry.MaxQueued, now) {
			return
		}
		s.behindPrefill(p, now)
		d := bal.Decide(snap, &p.Req, p.decisionElapsed(now))
		switch d.Kind {
		case lb.KindSelected:
			cand := &snap.Candidates[d.Index]
			if s.waitsForPrefill(p, cand.ClusterID, d, now) || s.staysWithPrompt(p, snap, d, now) {
				return
			}
			id, ok := s.pickBackend(cand.ClusterID, p)
			if !ok {
				p.Req.Excluded = append(p.Req.Excluded, cand.ClusterID)
				continue
			}
			s.grant(p, id, cand, d, elapsed)
			return
		case lb.KindWait:
			deadline := p.Arrival.Add(DefaultWaitCap)
			if p.HasMaxWait {
				deadline = p.Arrival.Add(p.MaxWait)
			}
			if now.Before(deadline) {
				s.park(p, minTime(now.Add(min(d.Wait, MaxPark)), deadline))
				return
			}
			s.unavailable(p, now, d)
			return
		default:
			s.unavailable(p, now, d)
			return
		}
	}
}

// unavailable parks p until its x-max-wait-ms deadline when it has one, else rejects it
// with 503. Only fresh stats can help an Unavailable decision, and every stats change
// re-evaluates the parked requests at once, so the park needs no polling timer: it wakes
// at the deadline (to fail) or on a change.
func (s *Scheduler) unavailable(p *Pending, now time.Time, d lb.Decision) {
	if p.HasMaxWait && d.Reason != lb.ReasonAllExcluded {
		if deadline := p.Arrival.Add(p.MaxWait); now.Before(deadline) {
			s.park(p, deadline)
			return
		}
	}
	// capacity_wait_ms: without x-max-wait-ms, a request that finds every backend full
	// waits up to the configured time for a slot.
	if !p.HasMaxWait && d.Reason == lb.ReasonNoCapacity && p.Entry.CapacityWait > 0 {
		if deadline := p.Arrival.Add(p.Entry.CapacityWait); now.Before(deadline) {
			s.park(p, deadline)
			return
		}
	}
	s.reject(p, unavailableReason(d.Reason))
}

// unavailableReason is the rejection of an Unavailable decision.
func unavailableReason(r lb.Reason) Reason {
	switch r {
	case lb.ReasonNoCapacity:
		return ReasonCapacityUnavailable
	case lb.ReasonAllExcluded:
		return ReasonNoEligibleBackend
	default:
		return ReasonUnavailable
	}
}

// noCandidates is the rejection of p when its target has no backend: no candidates for a
// first attempt, no eligible backend once an attempt failed.
func noCandidates(p *Pending) Reason {
	if p.Failures == 0 {
		return ReasonNoCandidates
	}
	return ReasonNoEligibleBackend
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// pickBackend chooses a backend of cluster, skipping backends that failed for p: the
// cluster's lead (ClusterBackendsLead), or, spreading, for a request with an affinity key
// the one its key picks (keyedBackend), else round-robin.
func (s *Scheduler) pickBackend(cluster string, p *Pending) (string, bool) {
	info, ok := s.clusters[cluster]
	if !ok {
		return "", false
	}
	if len(info.backends) > 1 {
		switch {
		case s.deps.ClusterBackends == ClusterBackendsLead:
			for _, id := range info.lead {
				if !p.backendFailed(id) {
					return id, true
				}
			}
			return "", false
		case p.SessionKey() != "":
			return s.keyedBackend(info.backends, p)
		}
	}
	// Round-robin, backends whose slot share is full last.
	k, ok := lb.RoundRobinBackend(info.backends, info.next, p.backendFailed, s.backendShareFull)
	if !ok {
		return "", false
	}
	id := info.backends[(info.next+k)%uint64(len(info.backends))]
	info.next += k + 1
	return id, true
}

// backendShareFull reports that backend id's own requests fill its slot share (shareFull).
func (s *Scheduler) backendShareFull(id string) bool {
	b := s.backends[id]
	return b != nil && b.shareFull()
}

// keyedBackend picks the backend of a keyed request (lb.KeyedBackend): the one its session
// key ranks first, or a sibling with a free slot when that one is full.
func (s *Scheduler) keyedBackend(backends []string, p *Pending) (string, bool) {
	return lb.KeyedBackend(backends, p.SessionKey(), p.backendFailed, s.backendFull)
}

// backendFull reports that backend id is unknown or runs as many requests as its engine's
// known concurrency (see full).
func (s *Scheduler) backendFull(id string) bool {
	b := s.backends[id]
	return b == nil || b.full()
}

// full reports that the backend runs as many requests as its engine's known concurrency
// limit, or that its own requests fill its slot share (shareFull), counting this
// gateway's reservations the backend has not reported yet.
func (b *backendState) full() bool {
	l := &b.view.Load
	return b.shareFull() || load.SlotsTaken(l.RunningRequests+uint64(len(b.reservations)), l.MaxEngineConcurrency)
}

// shareFull reports that the backend's own requests fill its share of the engine's slots
// (BackendView.SlotShare; never without one). A backend with a share reports its own
// requests in its queue size and output-generation count (the engine's running count
// covers every backend in front of it), and refuses a request expected to queue 0 ms once
// they fill the share.
func (b *backendState) shareFull() bool {
	l := &b.view.Load
	return load.SlotsTaken(l.QueueSize+l.OutputGenerationRequests+uint64(len(b.reservations)), b.view.SlotShare)
}

func (s *Scheduler) grant(p *Pending, backendID string, cand *lb.Candidate, d lb.Decision, elapsed time.Duration) {
	b := s.backends[backendID]
	out := Outcome{
		Kind: OutcomeGranted, BackendID: backendID, ClusterID: cand.ClusterID,
		RankDepth: d.RankDepth, KVSkipped: d.KVSkipped, Session: d.Session,
	}
	q := cand.Load.EffectiveQueue(p.Req.Priority)
	if q.IsFinite() {
		out.ExpectedQueueMs, out.HasExpected = uint64(max(q.Duration().Milliseconds(), 0)), true
	}
	// The backend's own time to first byte: the candidate's queue, then this request's
	// prefill at the backend's own throughput (a cluster's candidate sums its backends').
	out.InputTPS = s.inputTPS(b)
	if ttft := load.MillisOf(b.view.RTT) + q + load.WorkTime(float64(p.Req.InputTokens), out.InputTPS); ttft.IsFinite() {
		out.TTFT, out.HasTTFT = ttft.Duration(), true
	}
	s.estimate(&out, p, cand, d)
	if b.view.Seq != nil {
		out.Seq = b.view.Seq.Add(1)
	}
	work := p.Req.InputTokens
	if w, ok := prefillWork(p.Req.InputTokens, d.CachedShare); ok {
		work, out.PrefillTokens, out.HasPrefill = w, w, true
	}
	b.reservations = append(b.reservations, reservation{seq: out.Seq, tokens: work, priority: p.Req.Priority, at: p.Arrival.Add(elapsed)})
	s.touch(&b.view)
	out.Routing = -1
	if !p.routed {
		p.routed, out.Routing = true, elapsed
	}
	s.trackPrefill(p, cand, d.CachedShare, &out, p.Arrival.Add(elapsed))
	s.trying = nil
	p.Mailbox <- out
}

// prefillWork is the prefill work of a request of input tokens when a decision expects
// the share cached of them in the backend's prompt cache: the rest, rounded up, and at
// least one token (the engine computes the last position even of a prompt it holds
// whole). ok is false when the decision expects all of it to be prefilled.
func prefillWork(input uint64, cached float64) (uint64, bool) {
	if input == 0 || !(cached > 0) {
		return input, false
	}
	w := uint64(math.Ceil((1-min(cached, 1))*float64(input) - 1e-6)) // a share's rounding error is no token
	return min(max(w, 1), input), true
}

// estimate fills out's TTFT estimate of the granted candidate (the decision's, or a full
// prefill one when the balancer does not estimate) and the feedback that takes the
// observed time to first byte back to the candidate's correction, uncorrected. Only a
// full-prefill estimate feeds the cluster's correction: one the balancer discounted for a
// prefix it expects cached (cache affinity, session memory, prefix index) is as right as
// that expectation, which says nothing about the cluster's speed; it feeds the cluster's
// correction of discounted estimates instead (lb.Candidate.CachedCorrection).
func (s *Scheduler) estimate(out *Outcome, p *Pending, cand *lb.Candidate, d lb.Decision) {
	full := cand.Estimate(&p.Req, 1, load.Ignore{}).Comparator
	est := d.TTFT
	if est == 0 {
		est = full
	}
	if !est.IsFinite() || est <= 0 {
		return
	}
	out.Estimate, out.HasEstimate = est.Duration(), true
	discounted := est < full*(1-1e-9)
	scale := 1.0
	if discounted {
		scale = 0 // any scale below 1: the factor Estimate applied to a discounted prefill
	}
	if f := load.Millis(cand.EstimateFactor(scale)); f > 0 {
		est /= f
	}
	if d.Index >= 0 && d.Index < len(s.cells) {
		cell := s.cells[d.Index]
		out.Feedback = Feedback{cell: cell, gen: cell.generation(), raw: est.Duration(), cached: discounted}
	}
}

func (s *Scheduler) reject(p *Pending, r Reason) {
	s.trying = nil
	s.deps.Observer.Rejected(s.target, r)
	p.Mailbox <- Outcome{Kind: OutcomeRejected, Reason: r}
}

// rejectAll answers every parked request when the scheduler stops.
func (s *Scheduler) rejectAll(actor.Context) {
	for len(s.parked) > 0 {
		e := heap.Pop(&s.parked).(parkedEntry)
		if !e.p.parked {
			continue
		}
		e.p.parked = false
		s.parkedCount--
		s.deps.Observer.Parked(s.target, -1)
		s.reject(e.p, ReasonShuttingDown)
	}
	for _, p := range s.held {
		s.reject(p, ReasonShuttingDown)
	}
	s.held = nil
}

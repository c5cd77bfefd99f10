package lb

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// waitAndWiden is the bucketed TTFT balancer with an optional cache-affinity group, the
// affinity hold X and the prefill discount (docs/routing.md).
type waitAndWiden struct {
	cfg    wawConfig
	rng    Rand
	ring   ring
	groups keyCache[[]int32]
	// sessions remembers which cluster last served each affinity key (session stickiness
	// inside the affinity group).
	sessions sessionTable
	// Scratch reused across decisions so a decision on a cached key allocates nothing.
	scratch  []scored
	groupBuf []int32
	hashBuf  []byte
}

// wawConfig is the part of an lb-config entry the bucket routine needs.
type wawConfig struct {
	comparator   load.Comparator
	ignore       load.Ignore
	hasQueueSLO  bool
	queueFloor   load.Millis
	queueCeil    load.Millis
	bucket       load.Millis
	unlockFactor float64
	n            int
	maxQueued    uint64
	tie          load.Millis // tie tolerance of the ttft comparator (0 = exact ties only)
	// affinity
	seed           string
	virtualNodes   int
	selectionCount int
	hold           time.Duration
	scale          float64
	// session memory
	sessionTTL  time.Duration
	sessionSize int
}

func newWAWConfig(e lbconfig.Entry) wawConfig {
	return wawConfig{
		comparator:     e.Comparator,
		ignore:         load.Ignore{Queue: e.IgnoreQueueTime, Prefill: e.IgnoreInputProcessingTime},
		hasQueueSLO:    e.HasQueueSLO,
		queueFloor:     load.MillisOf(e.QueueFloor),
		queueCeil:      load.MillisOf(e.QueueCeil),
		bucket:         load.MillisOf(e.BucketSize),
		unlockFactor:   e.UnlockFactor,
		n:              max(e.N, 1),
		maxQueued:      e.MaxQueued,
		tie:            load.MillisOf(e.TieTolerance),
		seed:           e.Seed,
		virtualNodes:   max(e.VirtualNodes, 1),
		selectionCount: e.SelectionCount,
		hold:           e.AffinityWait,
		scale:          e.AffinityInputScale,
		sessionTTL:     e.SessionTTL,
		sessionSize:    e.SessionTableSize,
	}
}

func newWaitAndWiden(e lbconfig.Entry, rng Rand) *waitAndWiden {
	cfg := newWAWConfig(e)
	return &waitAndWiden{cfg: cfg, rng: rng, groups: newKeyCache[[]int32](defaultCacheKeys, false), sessions: newSessionTable(cfg.sessionSize, cfg.sessionTTL)}
}

// scored is one candidate's estimate during a decision.
type scored struct {
	idx   int32
	ttft  load.Millis // bucket value
	cmpv  load.Millis // comparator value (ttft comparator)
	queue load.Millis // effective queue delay
}

// queueLimit is the interpolated queue SLO: floor + (ceil − floor) × clamp(elapsed/SLO),
// with the ceiling when the request has no SLO.
func (c *wawConfig) queueLimit(r *Request, elapsed time.Duration) load.Millis {
	fraction := 1.0
	if r.SLO > 0 {
		fraction = min(max(float64(elapsed)/float64(r.SLO), 0), 1)
	}
	return c.queueFloor + (c.queueCeil-c.queueFloor)*load.Millis(fraction)
}

func (b *waitAndWiden) Decide(s *Snapshot, r *Request, elapsed time.Duration) Decision {
	if d, ok := precheck(s, r); !ok {
		return d
	}
	group := b.group(s, r)
	if group == nil {
		return b.cfg.evaluate(&b.scratch, b.rng, s, r, nil, 1, elapsed, elapsed, -1)
	}
	remember := b.sessions.enabled() && !r.At.IsZero()
	last := int32(-1)
	if remember {
		last = b.returning(s, r, group)
	}
	d := b.cfg.withHold(&b.scratch, b.rng, s, r, group, elapsed, last)
	if remember && d.Kind == KindSelected {
		b.sessions.put(r.AffinityKey, s.Candidates[d.Index].ClusterID, r.At)
	}
	return d
}

// returning looks r's affinity key up in the session memory. When the cluster that last
// served it is a current, non-excluded member of the key's affinity group, it returns that
// member's index, which the affinity phase prefers while it can take the request; else -1.
// A last cluster outside the group (a fallback during the hold's overflow) does not pull
// the session out of its group: once the group can take it again, the session goes back.
func (b *waitAndWiden) returning(s *Snapshot, r *Request, group []int32) int32 {
	cluster, ok := b.sessions.get(r.AffinityKey, r.At)
	if !ok || r.IsExcluded(cluster) {
		return -1
	}
	for _, i := range group {
		if s.Candidates[i].ClusterID == cluster {
			return i
		}
	}
	return -1
}

// withHold is the affinity decision with a hold X: the affinity phase over the group at the
// discounted prefill, waiting until X, then the global phase over every candidate at full
// prefill with buckets widening only with the time after X.
//
// last (≥ 0) is the cluster that last served the request's session: the affinity phase
// takes it whenever it is among the members that can take the request now.
func (c *wawConfig) withHold(scratch *[]scored, rng Rand, s *Snapshot, r *Request, group []int32, elapsed time.Duration, last int32) Decision {
	affine := c.evaluate(scratch, rng, s, r, group, c.scale, elapsed, elapsed, last)
	if affine.Kind == KindSelected {
		return affine
	}
	if elapsed < c.hold {
		return Wait(minWait(affine, c.hold-elapsed))
	}
	global := c.evaluate(scratch, rng, s, r, nil, 1, elapsed, elapsed-c.hold, -1)
	switch global.Kind {
	case KindSelected:
		global.RankDepth = len(group) + 1
		return global
	case KindWait:
		return Wait(minWait(affine, global.Wait))
	default:
		if affine.Kind == KindWait {
			return affine
		}
		return global
	}
}

// minWait is the smaller of d and the wait of a Wait decision.
func minWait(d Decision, w time.Duration) time.Duration {
	if d.Kind == KindWait {
		return min(d.Wait, w)
	}
	return w
}

// group returns the affinity group of r (ring members in ring order, computed before
// exclusions), or nil when affinity does not apply.
func (b *waitAndWiden) group(s *Snapshot, r *Request) []int32 {
	if b.cfg.selectionCount <= 0 || !r.hasAffinityKey() {
		return nil
	}
	if !b.ring.current(s) {
		b.ring.build(s, b.cfg.seed, b.cfg.virtualNodes)
		b.groups.reset()
	}
	if g, ok := b.groups.get(r.AffinityKey); ok {
		return g
	}
	count := min(b.cfg.selectionCount, len(s.Candidates))
	h := hashKey(&b.hashBuf, b.ring.prefix, r.AffinityKey)
	if len(r.AffinityKey) > maxCachedKeyBytes {
		b.groupBuf = b.ring.walk(h, count, b.groupBuf[:0])
		return b.groupBuf
	}
	g := b.ring.walk(h, count, make([]int32, 0, count))
	b.groups.put(r.AffinityKey, g)
	return g
}

// evaluate runs the bucket routine (capacity and queue-SLO filters, then TTFT buckets that
// unlock with the time budget, see unlock, then the comparator over a sample of the open
// candidates) over members (nil = every candidate) with prefill scale and a bucket budget;
// sloElapsed drives the queue-SLO interpolation. It returns Selected (rank 1), Wait (a
// locked bucket with capacity will unlock) or Unavailable. prefer (≥ 0) is taken when it is
// among the open candidates.
func (c *wawConfig) evaluate(scratch *[]scored, rng Rand, s *Snapshot, r *Request, members []int32, scale float64, sloElapsed, budget time.Duration, prefer int32) Decision {
	sc, overSLO := c.collect((*scratch)[:0], s, r, members, scale, sloElapsed, prefer)
	*scratch = sc
	if len(sc) == 0 {
		if overSLO {
			return Unavailable(ReasonQueueLimit)
		}
		return Unavailable(ReasonAllExcluded)
	}
	fastest, slowest := sc[0].ttft, sc[0].ttft
	for _, x := range sc[1:] {
		fastest, slowest = min(fastest, x.ttft), max(slowest, x.ttft)
	}
	if !fastest.IsFinite() {
		return Unavailable(ReasonNoFiniteTTFT)
	}
	unlocked, next := len(sc), time.Duration(0)
	if !slowest.IsFinite() || slowest-fastest > c.bucket {
		unlocked, next = c.unlock(s, sc, load.MillisOf(budget))
	}
	open := sc[:0]
	for _, x := range sc[:unlocked] {
		if s.Candidates[x.idx].Load.HasCapacity(c.maxQueued) {
			open = append(open, x)
		}
	}
	if len(open) == 0 {
		if next > 0 {
			return Wait(next)
		}
		return Unavailable(ReasonNoCapacity)
	}
	if prefer >= 0 {
		for _, x := range open {
			if x.idx == prefer {
				return selectedAt(x)
			}
		}
	}
	return selectedAt(c.best(rng, s, r, open))
}

// selectedAt is the rank-1 decision for x, carrying its TTFT estimate.
func selectedAt(x scored) Decision {
	d := Selected(int(x.idx), 1)
	d.TTFT = x.cmpv
	return d
}

// collect appends the non-excluded members that pass the queue SLO, with their estimates;
// overSLO reports whether the SLO dropped any. With a known last cluster (prefer ≥ 0) only
// that member's prefill is discounted by scale: it is the one known to hold the session's
// prefix, the others would prefill it in full — so cache and load are weighed in one
// estimate.
func (c *wawConfig) collect(sc []scored, s *Snapshot, r *Request, members []int32, scale float64, elapsed time.Duration, prefer int32) (_ []scored, overSLO bool) {
	limit := load.Millis(math.Inf(1))
	if c.hasQueueSLO {
		limit = c.queueLimit(r, elapsed)
	}
	add := func(i int32) {
		cand := &s.Candidates[i]
		if r.IsExcluded(cand.ClusterID) {
			return
		}
		sc1 := scale
		if prefer >= 0 && i != prefer {
			sc1 = 1
		}
		est := cand.Estimate(r, sc1, c.ignore)
		if est.Queue > limit {
			overSLO = true
			return
		}
		sc = append(sc, scored{idx: i, ttft: est.TTFT, cmpv: est.Comparator, queue: est.Queue})
	}
	if members == nil {
		for i := range s.Candidates {
			add(int32(i))
		}
	} else {
		for _, i := range members {
			add(i)
		}
	}
	return sc, overSLO
}

// unlock sorts sc by (TTFT, cluster id) and walks the buckets with the time budget. It
// returns how many leading entries are unlocked and, when the walk stopped at a locked
// bucket holding a finite candidate with capacity, the wait until that bucket unlocks.
func (c *wawConfig) unlock(s *Snapshot, sc []scored, budget load.Millis) (unlocked int, next time.Duration) {
	slices.SortFunc(sc, func(a, b scored) int {
		if v := cmp.Compare(a.ttft, b.ttft); v != 0 {
			return v
		}
		return cmp.Compare(s.Candidates[a.idx].ClusterID, s.Candidates[b.idx].ClusterID)
	})
	start := sc[0].ttft
	for k := 1; k < len(sc); k++ {
		t := sc[k].ttft
		if !t.IsFinite() {
			return k, 0
		}
		gap := t - start
		if gap <= c.bucket {
			continue
		}
		need := gap * load.Millis(c.unlockFactor)
		if budget < need {
			for _, x := range sc[k:] {
				if x.ttft.IsFinite() && s.Candidates[x.idx].Load.HasCapacity(c.maxQueued) {
					return k, (need - budget).Duration()
				}
			}
			return k, 0
		}
		budget -= need
		start = t
	}
	return len(sc), 0
}

// best samples min(n, len(open)) entries uniformly (partial Fisher–Yates) and returns the
// candidate index of the best by the comparator; the first minimum of the shuffled sample
// wins, so ties are broken at random. With the ttft comparator and a tie tolerance, the
// first entry of the shuffled sample within the tolerance of the minimum wins: near-ties
// are spread at random too, drawing nothing more from rng.
func (c *wawConfig) best(rng Rand, s *Snapshot, r *Request, open []scored) scored {
	k := min(c.n, len(open))
	for i := range k {
		j := i + rng.IntN(len(open)-i)
		open[i], open[j] = open[j], open[i]
	}
	bi := 0
	for i := 1; i < k; i++ {
		if c.less(s, r, &open[i], &open[bi]) {
			bi = i
		}
	}
	if c.tie > 0 && c.comparator == load.ComparatorTTFT {
		for i := range bi {
			if open[i].cmpv <= open[bi].cmpv+c.tie {
				return open[i]
			}
		}
	}
	return open[bi]
}

// less reports whether a is strictly better than b under the configured comparator.
func (c *wawConfig) less(s *Snapshot, r *Request, a, b *scored) bool {
	la, lb := &s.Candidates[a.idx].Load, &s.Candidates[b.idx].Load
	switch c.comparator {
	case load.ComparatorTTFT:
		return a.cmpv < b.cmpv
	case load.ComparatorQueueTime:
		return a.queue < b.queue
	case load.ComparatorNone:
		return load.CompareNone(la, a.queue, lb, b.queue) < 0
	default:
		ea := load.Estimate{Queue: a.queue, Comparator: a.cmpv}
		eb := load.Estimate{Queue: b.queue, Comparator: b.cmpv}
		return c.comparator.Score(la, ea, r.InputTokens) < c.comparator.Score(lb, eb, r.InputTokens)
	}
}

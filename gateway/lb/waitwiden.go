package lb

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/zeebo/xxh3"

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
	// prefix remembers which prompt blocks went to which cluster (prefix_affinity).
	prefix prefixIndex
	// kv accounts the sessions of affinity keys per cluster against its KV capacity (with
	// the session memory), for placing new sessions.
	kv prefixIndex
	// Scratch reused across decisions so a decision on a cached key allocates nothing.
	scratch  wawScratch
	groupBuf []int32
	roomBuf  []int32
	hashBuf  []byte
	heldBuf  []heldScale
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
	// prefix-aware routing and the client-named last cluster
	prefixAffinity bool
	prefixBlocks   int
	prefixTTL      time.Duration
	lastCluster    bool
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
		prefixAffinity: e.PrefixAffinity,
		prefixBlocks:   e.PrefixIndexBlocks,
		prefixTTL:      e.PrefixIndexTTL,
		lastCluster:    e.LastClusterAffinity,
	}
}

func newWaitAndWiden(e lbconfig.Entry, rng Rand) *waitAndWiden {
	cfg := newWAWConfig(e)
	b := &waitAndWiden{cfg: cfg, rng: rng, groups: newKeyCache[[]int32](defaultCacheKeys, false), sessions: newSessionTable(cfg.sessionSize, cfg.sessionTTL)}
	if cfg.prefixAffinity {
		b.prefix = newPrefixIndex(cfg.prefixBlocks, cfg.prefixTTL)
	}
	if b.sessions.enabled() {
		b.kv = newPrefixIndex(cfg.sessionSize, cfg.sessionTTL)
	}
	return b
}

// pricing is how a decision phase prices each candidate's prefill: per-candidate scales
// from the prefix index when per is set; else scale for every candidate, or, when only ≥ 0,
// for that candidate alone (the session's last cluster, the one known to hold its prefix;
// the others would prefill it in full), so cache and load are weighed in one estimate.
type pricing struct {
	scale float64
	only  int32
	per   []float64
	// held, when set, prices the listed candidates at their own scales (the share of the
	// request a cluster does not hold, from the session's KV accounting) and every other
	// candidate at scale.
	held []heldScale
	// patient, on a global phase's pricing, makes its buckets unlock at the pace of their
	// extra cost: a bucket that costs d more opens d after the hold (not
	// next_bucket_unlock_factor × d). For a session whose cluster holds its cache: waiting
	// for that cluster up to what moving would add is never slower than moving, and moving
	// also leaves the session's cache behind.
	patient bool
	// spread, when not 0, places a new session deterministically: among the candidates
	// tied with the best estimate that have a free slot, the one ranked first for spread
	// (the session's hash) by rendezvous hashing of the cluster ids, rather than the least
	// busy or a random one. Every gateway replica then places the same new session on the
	// same cluster while it can take it now, so a session whose turns reach different
	// replicas, none of which remembers it, still meets its cache.
	spread uint64
}

// fullPrice prices every candidate's prefill in full.
var fullPrice = pricing{scale: 1, only: -1}

// heldScale is the prefill scale of candidate idx for a session it holds part of.
type heldScale struct {
	idx   int32
	scale float64
}

func (p pricing) of(i int32) float64 {
	for _, h := range p.held {
		if h.idx == i {
			return h.scale
		}
	}
	switch {
	case p.per != nil:
		return p.per[i]
	case p.only >= 0 && i != p.only:
		return 1
	default:
		return p.scale
	}
}

// scored is one candidate's estimate during a decision.
type scored struct {
	idx   int32
	ttft  load.Millis // bucket value
	cmpv  load.Millis // comparator value (ttft comparator)
	queue load.Millis // effective queue delay
	scale float64     // prefill scale it was priced at
}

// scoredOf is candidate i's entry for estimate est at prefill scale.
func scoredOf(i int32, est load.Estimate, scale float64) scored {
	return scored{idx: i, ttft: est.TTFT, cmpv: est.Comparator, queue: est.Queue, scale: scale}
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
		if b.cfg.prefixAffinity && len(r.Prefix) > 0 && !r.At.IsZero() {
			return b.byPrefix(s, r, elapsed)
		}
		return b.cfg.evaluate(&b.scratch, b.rng, s, r, nil, fullPrice, elapsed, elapsed, -1)
	}
	if b.cfg.lastCluster {
		return b.byLastCluster(s, r, group, elapsed)
	}
	remember := b.sessions.enabled() && !r.At.IsZero()
	last, known := int32(-1), false
	var keyHash uint64
	if remember {
		keyHash = xxh3.HashString(r.AffinityKey)
		if last, known = b.returning(s, r, group); !known {
			group = b.placeNew(s, r, group)
		}
	}
	// A known session: each cluster is priced at what it would prefill of the session —
	// the cluster that served it last only the new suffix, a group member that served an
	// older turn the rest beyond that turn, any other cluster all of it — in the affinity
	// phase and after the hold, and the buckets of the costlier clusters unlock at the pace
	// of what they would cost more (patient pricing): a session whose cluster is full waits
	// for its cache as long as moving would add at least as much (the prefill it would
	// redo), and then moves where the least of it is redone.
	affine, global := pricing{scale: b.cfg.scale, only: last}, fullPrice
	switch {
	case last >= 0:
		held := b.heldScales(s, r, group, last, keyHash)
		affine = pricing{scale: 1, only: -1, held: held, patient: true}
		global = affine
	case known:
		// Back from an overflow outside its group (or its last cluster excluded): the group
		// members are priced at what they lack of the session, so it returns to the one
		// holding the most of it.
		held := b.heldScales(s, r, group, -1, keyHash)
		affine = pricing{scale: 1, only: -1, held: held, patient: true}
		global = affine
	case remember:
		// A new session (to this replica): no cluster holds any of it; placed by its key,
		// as every replica places it.
		affine = pricing{scale: 1, only: -1, spread: keyHash | 1}
	}
	d := b.cfg.withHold(&b.scratch, b.rng, s, r, group, elapsed, b.cfg.hold, affine, global, last)
	if remember && d.Kind == KindSelected {
		cand := &s.Candidates[d.Index]
		b.sessions.put(r.AffinityKey, cand.ClusterID, r.At)
		b.kv.recordKey(cand, keyHash, r.InputTokens, r.At)
	}
	return d
}

// heldScales prices a returning session on the clusters that hold part of it: its last
// cluster (index last, when it is a group member: ≥ 0) and the members of its group the
// KV accounting remembers it on,
// each at the share of r's input beyond the session's tokens there (for the last cluster
// the new suffix, all the engine has to prefill when it kept the prefix). When the
// accounting no longer holds the session on its last cluster (its tokens would not fit the
// cluster's cache beside the sessions sent since), that cluster gets the configured
// cache_affinity_input_tokens_scale.
func (b *waitAndWiden) heldScales(s *Snapshot, r *Request, group []int32, last int32, keyHash uint64) []heldScale {
	held := b.heldBuf[:0]
	share := func(i int32) (float64, bool) {
		prev, ok := b.kv.keyTokens(s.Candidates[i].ClusterID, keyHash, r.At)
		if !ok || r.InputTokens == 0 {
			return 0, false
		}
		return float64(r.InputTokens-min(prev, r.InputTokens)) / float64(r.InputTokens), true
	}
	if last >= 0 {
		if sc, ok := share(last); ok {
			held = append(held, heldScale{idx: last, scale: sc})
		} else {
			held = append(held, heldScale{idx: last, scale: b.cfg.scale})
		}
	}
	for _, i := range group {
		if i == last {
			continue
		}
		if sc, ok := share(i); ok {
			held = append(held, heldScale{idx: i, scale: sc})
		}
	}
	b.heldBuf = held
	return held
}

// placeNew narrows the affinity group of a session the memory does not know (a new one, or
// one whose cluster left the group) to the members whose KV cache has room for it, when
// some but not all have: the group's fastest member would otherwise take every new
// session and evict the older ones. The KV accounting counts each remembered session once,
// at its latest length.
func (b *waitAndWiden) placeNew(s *Snapshot, r *Request, group []int32) []int32 {
	b.kv.prune(s)
	room := b.kv.roomy(b.roomBuf[:0], s, r, group)
	b.roomBuf = room
	if len(room) == 0 || len(room) == len(group) {
		return group
	}
	return room
}

// minCachedShare is the share of a request's input the best-placed cluster must be
// expected to hold for prefix-aware routing to treat it as the request's affinity group
// (and hold the request for it up to cache_affinity_wait_ms).
const minCachedShare = 0.5

// byPrefix routes a request without an affinity key by its prompt (prefix_affinity): every
// candidate's prefill is discounted by the tokens it is expected to hold, according to the
// prefix index. When one cluster is expected to hold at least minCachedShare of the prompt,
// it is the request's affinity group of one: taken whenever it can take the request, waited
// for up to the hold X, and after X the global phase still weighs every candidate's cache.
// A prompt no cluster holds is a new session: it goes to a cluster whose KV cache has room
// for it when one can take it now (so new sessions fill the fleet's KV capacity instead of
// all landing on the fastest engine and evicting each other), else to any.
func (b *waitAndWiden) byPrefix(s *Snapshot, r *Request, elapsed time.Duration) Decision {
	scales, best := b.prefix.cachedScales(s, r)
	price := pricing{per: scales, only: -1}
	var d Decision
	if best >= 0 && 1-scales[best] >= minCachedShare {
		b.groupBuf = append(b.groupBuf[:0], best)
		global := price
		global.patient = true
		d = b.cfg.withHold(&b.scratch, b.rng, s, r, b.groupBuf, elapsed, b.cfg.hold, price, global, best)
	} else if r.Session != 0 {
		// A new prompt to this replica with a known conversation: an affinity group of the
		// clusters its session hash ranks first, placed within it by the hash — the same
		// on every replica, so a conversation whose turns reach replicas that never saw it
		// still meets its cache — narrowed to the members with KV room, held like a keyed
		// session.
		price.spread = r.Session
		group := sessionGroup(b.groupBuf[:0], s, r, b.cfg.sessionGroupSize())
		b.groupBuf = group
		if room := b.prefix.roomy(b.roomBuf[:0], s, r, group); len(room) > 0 && len(room) < len(group) {
			b.roomBuf = room
			group = room
		}
		d = b.cfg.withHold(&b.scratch, b.rng, s, r, group, elapsed, b.cfg.hold, price, price, -1)
	} else if room := b.prefix.roomy(b.groupBuf[:0], s, r, nil); len(room) > 0 && len(room) < len(s.Candidates) {
		b.groupBuf = room
		d = b.cfg.withHold(&b.scratch, b.rng, s, r, room, elapsed, 0, price, price, -1)
	} else {
		d = b.cfg.evaluate(&b.scratch, b.rng, s, r, nil, price, elapsed, elapsed, -1)
	}
	if d.Kind == KindSelected {
		b.prefix.record(&s.Candidates[d.Index], r)
	}
	return d
}

// byLastCluster is the affinity decision with last_cluster_affinity: the client names the
// cluster that served the session's previous turn (Request.LastCluster). A returning
// session (the cluster is a current candidate) has it promoted to the front of its group
// — replacing the group's last member when it was outside — and preferred while it can
// take the request; the hold X and the group's prefill discount apply. A new session (no
// cluster named) or a stale one (the cluster is gone) tries its group first but neither
// waits nor gets a discount. The promotion is per request; nothing is remembered.
func (b *waitAndWiden) byLastCluster(s *Snapshot, r *Request, group []int32, elapsed time.Duration) Decision {
	last := s.index(r.LastCluster)
	state := SessionReturning
	switch {
	case r.LastCluster == "":
		state = SessionNew
	case last < 0:
		state = SessionStale
	}
	var d Decision
	if state == SessionReturning {
		g := promote(b.groupBuf[:0], group, last)
		b.groupBuf = g
		d = b.cfg.withHold(&b.scratch, b.rng, s, r, g, elapsed, b.cfg.hold, pricing{scale: b.cfg.scale, only: -1}, fullPrice, last)
	} else {
		d = b.cfg.withHold(&b.scratch, b.rng, s, r, group, elapsed, 0, fullPrice, fullPrice, -1)
	}
	d.Session = state
	return d
}

// promote returns group with last at its front: moved there when it is a member, else in
// place of the group's last member (the group keeps its size).
func promote(dst, group []int32, last int32) []int32 {
	dst = append(dst, last)
	for _, i := range group {
		if i != last && len(dst) < len(group) {
			dst = append(dst, i)
		}
	}
	return dst
}

// returning looks r's affinity key up in the session memory. When the cluster that last
// served it is a current, non-excluded member of the key's affinity group, it returns that
// member's index, which the affinity phase prefers while it can take the request; else -1.
// known says whether the memory knows the session at all (a new session: false).
// A last cluster outside the group (a fallback during the hold's overflow) does not pull
// the session out of its group: once the group can take it again, the session goes back.
func (b *waitAndWiden) returning(s *Snapshot, r *Request, group []int32) (last int32, known bool) {
	cluster, ok := b.sessions.get(r.AffinityKey, r.At)
	if !ok || r.IsExcluded(cluster) {
		return -1, ok
	}
	for _, i := range group {
		if s.Candidates[i].ClusterID == cluster {
			return i, true
		}
	}
	return -1, true
}

// withHold is the affinity decision with a hold: the affinity phase over the group at the
// affine pricing (the discounted prefill), waiting until hold, then the global phase over
// every candidate at the global pricing (full prefill, or the prefix index's expected
// cache) with buckets widening only with the time after the hold.
//
// last (≥ 0) is the cluster that last served the request's session: the affinity phase
// takes it whenever it is among the members that can take the request now.
func (c *wawConfig) withHold(ws *wawScratch, rng Rand, s *Snapshot, r *Request, group []int32, elapsed, hold time.Duration, affinePrice, globalPrice pricing, last int32) Decision {
	affine := c.paced(ws, rng, s, r, group, affinePrice, elapsed, elapsed, last)
	if affine.Kind == KindSelected {
		return affine
	}
	if elapsed < hold {
		return Wait(minWait(affine, hold-elapsed))
	}
	global := c.paced(ws, rng, s, r, nil, globalPrice, elapsed, elapsed-hold, -1)
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
func (c *wawConfig) evaluate(ws *wawScratch, rng Rand, s *Snapshot, r *Request, members []int32, price pricing, sloElapsed, budget time.Duration, prefer int32) Decision {
	if members == nil && c.usable(s, r, price, prefer) {
		if d, ok := c.evaluateIndexed(ws, rng, s, r, price, sloElapsed, load.MillisOf(budget)); ok {
			return d
		}
	}
	sc, overSLO := c.collect(ws.sc[:0], s, r, members, price, sloElapsed)
	ws.sc = sc
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
	open := openOf(s, sc[:unlocked], c.maxQueued)
	if len(open) == 0 {
		return noneOpen(next)
	}
	if prefer >= 0 {
		for _, x := range open {
			if x.idx == prefer {
				return selectedAt(x)
			}
		}
	}
	if price.spread != 0 {
		if x, ok := c.bySpread(s, open, price.spread); ok {
			return selectedAt(x)
		}
	}
	return selectedAt(c.best(rng, s, r, open))
}

// wawScratch is a balancer's state reused across decisions: the estimates' buffer and the
// TTFT index of the global phase.
type wawScratch struct {
	sc    []scored
	index *ttftIndex // built on the first decision that uses it
}

// openOf filters unlocked (in place) to the candidates with capacity, in order.
func openOf(s *Snapshot, unlocked []scored, maxQueued uint64) []scored {
	open := unlocked[:0]
	for _, x := range unlocked {
		if s.Candidates[x.idx].Load.HasCapacity(maxQueued) {
			open = append(open, x)
		}
	}
	return open
}

// noneOpen is the decision when no unlocked candidate has capacity: wait for the next
// bucket when one with capacity will unlock (next > 0), else none has capacity.
func noneOpen(next time.Duration) Decision {
	if next > 0 {
		return Wait(next)
	}
	return Unavailable(ReasonNoCapacity)
}

// paced is evaluate with a patient pricing's pace: the bucket budget is scaled by the
// unlock factor (so a bucket opens when the budget reaches its whole gap) and a wait is
// scaled back to real time.
func (c *wawConfig) paced(ws *wawScratch, rng Rand, s *Snapshot, r *Request, members []int32, price pricing, sloElapsed, budget time.Duration, prefer int32) Decision {
	if !price.patient {
		return c.evaluate(ws, rng, s, r, members, price, sloElapsed, budget, prefer)
	}
	d := c.evaluate(ws, rng, s, r, members, price, sloElapsed, time.Duration(float64(budget)*c.unlockFactor), prefer)
	if d.Kind == KindWait && c.unlockFactor > 0 {
		d.Wait = time.Duration(float64(d.Wait) / c.unlockFactor)
	}
	return d
}

// selectedAt is the rank-1 decision for x, carrying its TTFT estimate and the share of the
// prompt its pricing expected cached.
func selectedAt(x scored) Decision {
	d := Selected(int(x.idx), 1)
	d.TTFT = x.cmpv
	if x.scale >= 0 && x.scale < 1 {
		d.CachedShare = 1 - x.scale
	}
	return d
}

// collect appends the non-excluded members that pass the queue SLO, with their estimates
// at the given prefill pricing; overSLO reports whether the SLO dropped any.
func (c *wawConfig) collect(sc []scored, s *Snapshot, r *Request, members []int32, price pricing, elapsed time.Duration) (_ []scored, overSLO bool) {
	limit := load.Millis(math.Inf(1))
	if c.hasQueueSLO {
		limit = c.queueLimit(r, elapsed)
	}
	add := func(i int32) {
		cand := &s.Candidates[i]
		if r.IsExcluded(cand.ClusterID) {
			return
		}
		scale := price.of(i)
		est := cand.Estimate(r, scale, c.ignore)
		if est.Queue > limit {
			overSLO = true
			return
		}
		sc = append(sc, scoredOf(i, est, scale))
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

// unlock walks the buckets of sc in (TTFT, cluster id) order with the time budget. It
// returns how many leading entries are unlocked — sc[:unlocked] then holds them in that
// order; the rest of sc is left in any order — and, when the walk stopped at a locked
// bucket holding a finite candidate with capacity, the wait until that bucket unlocks.
//
// The unlocked entries are always those below a TTFT threshold, so instead of sorting all
// of sc (O(n log n), most of a decision's cost on a large fleet) each bucket step
// partitions the entries within the bucket of the current start to the front and only
// they are sorted: O(n × steps + m log m) for m unlocked entries. After maxPartitionSteps
// steps (a long budget opening many sparse buckets) the rest is sorted and walked as
// the straightforward walk over every entry sorted does (unlockSorted in the tests). The
// result is the one that walk gives.
func (c *wawConfig) unlock(s *Snapshot, sc []scored, budget load.Millis) (unlocked int, next time.Duration) {
	start := sc[0].ttft
	for _, x := range sc[1:] {
		start = min(start, x.ttft)
	}
	lo := 0 // sc[:lo] is unlocked (unsorted); every entry of sc[lo:] has a larger TTFT
	for range maxPartitionSteps {
		p := lo
		for i := lo; i < len(sc); i++ {
			if t := sc[i].ttft; t.IsFinite() && t-start <= c.bucket {
				sc[p], sc[i] = sc[i], sc[p]
				p++
			}
		}
		if p == len(sc) {
			sortScored(s, sc)
			return len(sc), 0
		}
		t := sc[p].ttft
		for _, x := range sc[p+1:] {
			t = min(t, x.ttft)
		}
		if !t.IsFinite() {
			sortScored(s, sc[:p])
			return p, 0
		}
		need := (t - start) * load.Millis(c.unlockFactor)
		if budget < need {
			sortScored(s, sc[:p])
			return p, c.waitFor(s, sc[p:], need-budget)
		}
		budget -= need
		start, lo = t, p
	}
	sortScored(s, sc[:lo])
	sortScored(s, sc[lo:])
	return c.walk(s, sc, lo, start, budget)
}

// maxPartitionSteps is how many bucket steps unlock takes by partitioning before it sorts.
const maxPartitionSteps = 4

// sortScored sorts sc by (TTFT, cluster id).
func sortScored(s *Snapshot, sc []scored) {
	slices.SortFunc(sc, func(a, b scored) int {
		if v := cmp.Compare(a.ttft, b.ttft); v != 0 {
			return v
		}
		return cmp.Compare(s.Candidates[a.idx].ClusterID, s.Candidates[b.idx].ClusterID)
	})
}

// walk continues the bucket walk over sorted sc at entry k0, with the current bucket
// starting at start and budget left.
func (c *wawConfig) walk(s *Snapshot, sc []scored, k0 int, start, budget load.Millis) (unlocked int, next time.Duration) {
	for k := max(k0, 1); k < len(sc); k++ {
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
			return k, c.waitFor(s, sc[k:], need-budget)
		}
		budget -= need
		start = t
	}
	return len(sc), 0
}

// waitFor is wait when locked holds a finite candidate with capacity, else 0.
func (c *wawConfig) waitFor(s *Snapshot, locked []scored, wait load.Millis) time.Duration {
	for _, x := range locked {
		if x.ttft.IsFinite() && s.Candidates[x.idx].Load.HasCapacity(c.maxQueued) {
			return wait.Duration()
		}
	}
	return 0
}

// best samples min(n, len(open)) entries uniformly (partial Fisher–Yates) and returns the
// candidate index of the best by the comparator; the first minimum of the shuffled sample
// wins, so ties are broken at random. With the ttft comparator and a tie tolerance, the
// least busy entry of the sample within the tolerance of the minimum wins (the first of
// the shuffled sample among equally busy ones): near-ties are spread by load, drawing
// nothing more from rng.
func (c *wawConfig) best(rng Rand, s *Snapshot, r *Request, open []scored) scored {
	k := min(c.n, len(open))
	for i := range k {
		j := i + rng.IntN(len(open)-i)
		open[i], open[j] = open[j], open[i]
	}
	return c.pick(s, r, open[:k])
}

// pick is the best entry of a shuffled sample by the comparator (see best).
func (c *wawConfig) pick(s *Snapshot, r *Request, open []scored) scored {
	k := len(open)
	bi := 0
	for i := 1; i < k; i++ {
		if c.less(s, r, &open[i], &open[bi]) {
			bi = i
		}
	}
	if c.tie > 0 && c.comparator == load.ComparatorTTFT {
		// Near-ties go to the least busy of them (running requests, reservations
		// included, relative to the engine's concurrency), the first of the shuffled
		// sample among equally busy ones: a join-the-shorter-queue choice that keeps
		// equivalent clusters' shares even instead of as uneven as coin flips.
		limit, pick := open[bi].cmpv+c.tie, -1
		for i := range k {
			if open[i].cmpv > limit {
				continue
			}
			if pick < 0 || busier(&s.Candidates[open[pick].idx].Load, &s.Candidates[open[i].idx].Load) {
				pick = i
			}
		}
		return open[pick]
	}
	return open[bi]
}

// maxSessionGroup bounds the size of a new prompt's affinity group (sessionGroup).
const maxSessionGroup = 8

// sessionGroupSize is the size of a new prompt's affinity group: the configured
// cache_affinity_backend_selection_count, 2 when none is.
func (c *wawConfig) sessionGroupSize() int {
	if c.selectionCount > 0 {
		return min(c.selectionCount, maxSessionGroup)
	}
	return 2
}

// sessionGroup appends to dst the k candidates (excluded ones skipped) whose cluster ids
// rank first for r.Session by rendezvous hashing, best first: the same clusters on every
// replica, and a cluster that joins or leaves moves only the sessions it ranks first.
func sessionGroup(dst []int32, s *Snapshot, r *Request, k int) []int32 {
	var top [maxSessionGroup]uint64
	for i := range s.Candidates {
		c := &s.Candidates[i]
		if r.IsExcluded(c.ClusterID) {
			continue
		}
		h := rendezvous(c.ClusterID, r.Session)
		n := len(dst)
		if n == k && h <= top[n-1] {
			continue
		}
		if n < k {
			dst = append(dst, 0)
			n++
		}
		j := n - 1
		for ; j > 0 && top[j-1] < h; j-- {
			top[j], dst[j] = top[j-1], dst[j-1]
		}
		top[j], dst[j] = h, int32(i)
	}
	return dst
}

// bySpread picks, among the open candidates within the tie tolerance of the best estimate
// (the ttft comparator only) that have a free slot, the one whose cluster id ranks first
// for spread by rendezvous hashing; false when none has a free slot.
func (c *wawConfig) bySpread(s *Snapshot, open []scored, spread uint64) (scored, bool) {
	if c.comparator != load.ComparatorTTFT {
		return scored{}, false
	}
	lo := open[0].cmpv
	for _, x := range open[1:] {
		lo = min(lo, x.cmpv)
	}
	var pick scored
	var top uint64
	found := false
	for _, x := range open {
		cand := &s.Candidates[x.idx]
		if x.cmpv > lo+c.tie || !cand.Load.HasFreeSlot() {
			continue
		}
		if h := rendezvous(cand.ClusterID, spread); !found || h > top {
			pick, top, found = x, h, true
		}
	}
	return pick, found
}

// busier reports whether a's engine is strictly busier than b's: more running requests per
// slot of concurrency (an unknown concurrency counts as one slot).
func busier(a, b *load.Load) bool {
	am, bm := max(a.MaxEngineConcurrency, 1), max(b.MaxEngineConcurrency, 1)
	return a.RunningRequests*bm > b.RunningRequests*am
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

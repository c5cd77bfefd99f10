package lb

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/switchyard/switchyard/engines/load"
)

// The TTFT index of wait-and-widen's global phase: the bucket routine over every candidate
// of a large snapshot without estimating every candidate (docs/routing.md, "Decisions on
// large fleets").
//
// At full prefill a candidate's bucket value is a line in the request's input tokens x:
// TTFT = a + b·x, with a = f·(RTT + queue at the request's priority) and b = f·1000/TPS
// (f its TTFT correction; a term the configuration ignores is 0). The index keeps, per
// priority, the candidates with a finite line in blocks of about √n consecutive slopes,
// each block's members in ascending a, with the block's least and greatest slope. For a
// request, a + x·bmin and a + x·bmax bound every member's estimate, and they are monotone
// in a within a block, so each question the routine asks — the fastest estimate, whether
// any is more than a bucket above a value, the least estimate above a bucket — reads each
// block's bound and estimates exactly only the members the bounds cannot rule out. The
// bounds prune; every comparison the decision depends on is made on exact estimates
// (Candidate.Estimate), so the outcome is the straightforward routine's.
//
// A decision costs O(√n) block bounds plus the members near the answer. Updates follow
// Snapshot.Changed: O(√n) per changed candidate and cached priority.

// indexMinCandidates is the smallest snapshot whose global phase uses the index: below it
// the straightforward scan is as fast.
var indexMinCandidates = 32

// materializeLimit is how many candidates the bounds may admit to the unlocked buckets for
// the index to list them (and sample them as the scan does, in (TTFT, cluster id) order);
// beyond it the sample is drawn by rejection, uniform over the same set.
var materializeLimit = 128

// maxIndexSteps is how many bucket steps an indexed decision takes before it leaves the
// decision to the straightforward scan (a long budget opening many sparse buckets).
const maxIndexSteps = 16

// maxIndexPriorities is how many priorities the index keeps lines for at once.
const maxIndexPriorities = 4

// boundSlack widens the bounds by a relative and an absolute margin far above the
// rounding of the exact estimate's few floating-point operations.
const boundSlack = 1e-9

func lower(v float64) float64 { return v - math.Abs(v)*boundSlack - boundSlack }
func upper(v float64) float64 { return v + math.Abs(v)*boundSlack + boundSlack }

// ttftIndex is one balancer's index of one snapshot's candidates.
type ttftIndex struct {
	snap      *Snapshot
	gen       uint64
	seen      int // changes of snap already applied
	ignore    load.Ignore
	maxQueued uint64
	byID      map[string]int32
	capable   []bool  // HasCapacity(maxQueued), per candidate
	capTree   fenwick // over capable, in snapshot order
	prios     [maxIndexPriorities]prioIndex
	tick      uint64
	// per decision
	mark    []uint32 // mark[i] == stamp: candidate i is excluded or priced apart (held)
	stamp   uint32
	excl    []int32 // excluded candidate indices, deduplicated
	exclCap []int32 // the capable ones among them, ascending
	held    []scored
	ends    []int32 // per block, the end of the members the bounds admit (unlocked)
	cum     []int   // per block, the admitted candidates up to it, held ones included
	drawn   []int32
	swaps   []swap
	// diverged counts the decisions sampled by rejection (their choice is not the scan's
	// for the same random draws, only of the same distribution).
	diverged int
}

// prioIndex is the blocks of one priority's lines.
type prioIndex struct {
	valid    bool
	priority uint32
	lastUse  uint64
	a, b     []float64 // per candidate
	q        []float64 // per candidate: its effective queue at the priority (0 when ignored)
	queues   maxTree   // every candidate's effective queue at the priority (for a queue SLO)
	block    []int32   // per candidate: its block, -1 when its line is not finite
	blocks   []slopeBlock
	lo       []float64 // per block, the least slope it held when built (insertion boundary)
	outside  int       // candidates with no finite line
	size     int       // block size when built
	order    []int32   // scratch of build
}

// slopeBlock is the candidates of a range of slopes, in ascending a.
type slopeBlock struct {
	members    []int32
	bmin, bmax float64
}

// swap is one displaced position of a virtual Fisher–Yates shuffle.
type swap struct{ pos, val int }

// usable reports whether the index can decide the global phase of this decision exactly:
// a large snapshot, every candidate at full prefill but the listed held ones, a request
// with input. (With a queue SLO the decision also checks that the SLO drops no candidate.)
func (c *wawConfig) usable(s *Snapshot, r *Request, price pricing, prefer int32) bool {
	return len(s.Candidates) >= indexMinCandidates && r.InputTokens > 0 &&
		price.per == nil && price.only < 0 && price.scale == 1 && price.spread == 0 && prefer < 0
}

// sync makes the index current for s: rebuilt for a new snapshot content, else the changed
// candidates updated.
func (ix *ttftIndex) sync(s *Snapshot, c *wawConfig) {
	pending := len(s.changes) - ix.seen
	if ix.snap != s || ix.gen != s.gen || pending < 0 || ix.ignore != c.ignore || ix.maxQueued != c.maxQueued ||
		pending > len(s.Candidates)/4 {
		ix.reset(s, c)
		return
	}
	for _, i := range s.changes[ix.seen:] {
		if i < 0 || int(i) >= len(s.Candidates) {
			continue
		}
		if capable := s.Candidates[i].Load.HasCapacity(ix.maxQueued); capable != ix.capable[i] {
			ix.capable[i] = capable
			ix.capTree.add(int(i), boolDelta(capable))
		}
		for k := range ix.prios {
			if p := &ix.prios[k]; p.valid {
				p.update(ix, i)
			}
		}
	}
	ix.seen = len(s.changes)
}

func boolDelta(b bool) int {
	if b {
		return 1
	}
	return -1
}

// reset indexes s from scratch; the lines of each priority are built on first use.
func (ix *ttftIndex) reset(s *Snapshot, c *wawConfig) {
	n := len(s.Candidates)
	ix.snap, ix.gen, ix.seen = s, s.gen, len(s.changes)
	ix.ignore, ix.maxQueued = c.ignore, c.maxQueued
	if ix.byID == nil {
		ix.byID = make(map[string]int32, n)
	}
	clear(ix.byID)
	ix.capable = slices.Grow(ix.capable[:0], n)[:n]
	for i := range s.Candidates {
		ix.byID[s.Candidates[i].ClusterID] = int32(i)
		ix.capable[i] = s.Candidates[i].Load.HasCapacity(c.maxQueued)
	}
	ix.capTree.build(ix.capable)
	for k := range ix.prios {
		ix.prios[k].valid = false
	}
	if len(ix.mark) != n {
		ix.mark, ix.stamp = make([]uint32, n), 0
	}
}

// prio returns the lines for priority, built when not cached (evicting the least recently
// used priority).
func (ix *ttftIndex) prio(priority uint32) *prioIndex {
	ix.tick++
	slot := 0
	for k := range ix.prios {
		p := &ix.prios[k]
		if p.valid && p.priority == priority {
			p.lastUse = ix.tick
			return p
		}
		if !p.valid || (ix.prios[slot].valid && p.lastUse < ix.prios[slot].lastUse) {
			slot = k
		}
	}
	p := &ix.prios[slot]
	p.build(ix, priority)
	p.lastUse = ix.tick
	return p
}

// line is candidate i's bucket value at full prefill as a + b·x (see the file comment);
// ok is false when it is not finite for every x > 0.
func (ix *ttftIndex) line(i int32, priority uint32) (a, b, q float64, ok bool) {
	c := &ix.snap.Candidates[i]
	f := c.factor(1)
	if !(f > 0) {
		f = 1
	}
	if !ix.ignore.Queue {
		q = float64(c.Load.EffectiveQueue(priority))
	}
	a = (float64(load.MillisOf(c.RTT)) + q) * f
	if !ix.ignore.Prefill {
		if !load.ValidTPS(c.Load.InputTPS) {
			return 0, 0, q, false
		}
		tps := c.Load.InputTPS
		if load.ValidTPS(c.Load.RequestInputTPS) {
			tps = c.Load.RequestInputTPS
		}
		b = 1000 / tps * f
	}
	ok = !math.IsInf(a, 0) && !math.IsNaN(a) && !math.IsInf(b, 0) && !math.IsNaN(b)
	return a, b, q, ok
}

// build indexes every candidate's line for priority.
func (p *prioIndex) build(ix *ttftIndex, priority uint32) {
	n := len(ix.snap.Candidates)
	p.valid, p.priority, p.outside = true, priority, 0
	p.a = slices.Grow(p.a[:0], n)[:n]
	p.b = slices.Grow(p.b[:0], n)[:n]
	p.q = slices.Grow(p.q[:0], n)[:n]
	p.block = slices.Grow(p.block[:0], n)[:n]
	order := p.order[:0]
	queues := p.queues.leaves(n)
	for i := range n {
		a, b, q, ok := ix.line(int32(i), priority)
		p.a[i], p.b[i], p.q[i], p.block[i] = a, b, q, -1
		queues[i] = float64(ix.snap.Candidates[i].Load.EffectiveQueue(priority))
		if !ok {
			p.outside++
			continue
		}
		order = append(order, int32(i))
	}
	slices.SortFunc(order, func(x, y int32) int { // equal slopes in a order: tighter blocks
		if v := cmp.Compare(p.b[x], p.b[y]); v != 0 {
			return v
		}
		return p.byA(x, y)
	})
	p.queues.build()
	p.order = order
	p.size = max(16, int(math.Sqrt(float64(n))))
	p.blocks, p.lo = p.blocks[:0], p.lo[:0]
	for start := 0; start < len(order); start += p.size {
		members := order[start:min(start+p.size, len(order))]
		var reuse []int32 // the members slice this block had when last built
		if k := len(p.blocks); k < cap(p.blocks) {
			reuse = p.blocks[:k+1][k].members
		}
		// Room for as many again: updates insert without allocating.
		blk := slopeBlock{members: append(slices.Grow(reuse[:0], 2*p.size), members...), bmin: p.b[members[0]], bmax: p.b[members[len(members)-1]]}
		slices.SortFunc(blk.members, p.byA)
		for _, i := range blk.members {
			p.block[i] = int32(len(p.blocks)) //nolint:gosec // at most √n + 1 blocks
		}
		p.blocks = append(p.blocks, blk)
		p.lo = append(p.lo, blk.bmin)
	}
}

// byA orders candidates by their line's a (then index).
func (p *prioIndex) byA(x, y int32) int {
	if v := cmp.Compare(p.a[x], p.a[y]); v != 0 {
		return v
	}
	return cmp.Compare(x, y)
}

// update re-indexes candidate i's line.
func (p *prioIndex) update(ix *ttftIndex, i int32) {
	if k := p.block[i]; k >= 0 {
		blk := &p.blocks[k]
		if j := slices.Index(blk.members, i); j >= 0 {
			blk.members = slices.Delete(blk.members, j, j+1)
		}
	} else {
		p.outside--
	}
	a, b, q, ok := ix.line(i, p.priority)
	p.a[i], p.b[i], p.q[i], p.block[i] = a, b, q, -1
	p.queues.set(int(i), float64(ix.snap.Candidates[i].Load.EffectiveQueue(p.priority)))
	if !ok || len(p.blocks) == 0 {
		if ok { // no block to hold it: index this priority again
			p.valid = false
		}
		p.outside++
		return
	}
	k, _ := slices.BinarySearch(p.lo, b)
	if k == len(p.lo) || p.lo[k] > b {
		k = max(k-1, 0)
	}
	blk := &p.blocks[k]
	j, _ := slices.BinarySearchFunc(blk.members, i, p.byA)
	blk.members = slices.Insert(blk.members, j, i)
	blk.bmin, blk.bmax = min(blk.bmin, b), max(blk.bmax, b)
	p.block[i] = int32(k) //nolint:gosec // a block index
	if len(blk.members) > 4*p.size {
		p.valid = false // one block took most updates: rebuild on next use
	}
}

// query is one decision's view of the index: the request's input, the marked
// (excluded or held) candidates left out of the blocks, the held ones priced apart.
type query struct {
	ix   *ttftIndex
	p    *prioIndex
	s    *Snapshot
	r    *Request
	x    float64
	held []scored
	// the candidate estimated last (-1: none yet) and its estimate
	last     int32
	lastTTFT load.Millis
}

func (q *query) skipped(i int32) bool { return q.ix.mark[i] == q.ix.stamp }

// exact is candidate i's bucket value at full prefill. A candidate whose estimate's inputs
// are those of the candidate estimated last has its estimate (a fleet of equal engines
// has many equal candidates; the bounds cannot tell them apart from a better one).
func (q *query) exact(i int32) load.Millis {
	if q.last >= 0 && q.sameInputs(i, q.last) {
		return q.lastTTFT
	}
	q.last, q.lastTTFT = i, q.s.Candidates[i].Estimate(q.r, 1, q.ix.ignore).TTFT
	return q.lastTTFT
}

// sameInputs reports whether candidates i and j have the same full-prefill bucket values:
// the same round trip, queue at the priority (0 when ignored), correction and, unless the
// prefill is ignored, throughputs.
func (q *query) sameInputs(i, j int32) bool {
	ci, cj := &q.s.Candidates[i], &q.s.Candidates[j]
	return ci.RTT == cj.RTT && q.p.q[i] == q.p.q[j] && ci.Correction == cj.Correction &&
		(q.ix.ignore.Prefill || ci.Load.InputTPS == cj.Load.InputTPS && ci.Load.RequestInputTPS == cj.Load.RequestInputTPS)
}

// fastest is the least finite estimate of the unmarked candidates and the held ones
// (+Inf when none is finite).
func (q *query) fastest() load.Millis {
	best := math.Inf(1)
	for _, h := range q.held {
		if h.ttft.IsFinite() {
			best = min(best, float64(h.ttft))
		}
	}
	first, firstLB := -1, math.Inf(1)
	for k := range q.p.blocks {
		blk := &q.p.blocks[k]
		if len(blk.members) == 0 {
			continue
		}
		if lb := q.p.a[blk.members[0]] + q.x*blk.bmin; lb < firstLB {
			first, firstLB = k, lb
		}
	}
	if first >= 0 {
		best = q.blockMin(&q.p.blocks[first], best)
	}
	for k := range q.p.blocks {
		if k != first && len(q.p.blocks[k].members) > 0 {
			best = q.blockMin(&q.p.blocks[k], best)
		}
	}
	return load.Millis(best)
}

// blockMin is the least of best and blk's unmarked members' estimates.
func (q *query) blockMin(blk *slopeBlock, best float64) float64 {
	for _, i := range blk.members {
		if lower(q.p.a[i]+q.x*blk.bmin) >= best {
			break
		}
		if q.skipped(i) {
			continue
		}
		if t := float64(q.exact(i)); t < best {
			best = t
		}
	}
	return best
}

// above reports whether an unmarked or held candidate has a finite estimate t with
// t − start > bucket, and with capacity when capable is set.
func (q *query) above(start, bucket load.Millis, capable bool) bool {
	for _, h := range q.held {
		if h.ttft.IsFinite() && h.ttft-start > bucket && (!capable || q.ix.capable[h.idx]) {
			return true
		}
	}
	for k := range q.p.blocks {
		blk := &q.p.blocks[k]
		for j := len(blk.members) - 1; j >= 0; j-- {
			i := blk.members[j]
			if load.Millis(upper(q.p.a[i]+q.x*blk.bmax))-start <= bucket {
				break
			}
			if q.skipped(i) || (capable && !q.ix.capable[i]) {
				continue
			}
			if t := q.exact(i); t.IsFinite() && t-start > bucket {
				return true
			}
		}
	}
	return false
}

// next is the least finite estimate t of the unmarked and held candidates with
// t − start > bucket: the start of the next bucket (+Inf when there is none).
func (q *query) next(start, bucket load.Millis) load.Millis {
	best := math.Inf(1)
	for _, h := range q.held {
		if h.ttft.IsFinite() && h.ttft-start > bucket {
			best = min(best, float64(h.ttft))
		}
	}
	for k := range q.p.blocks {
		blk := &q.p.blocks[k]
		if len(blk.members) == 0 || lower(q.p.a[blk.members[0]]+q.x*blk.bmin) >= best ||
			load.Millis(upper(q.p.a[blk.members[len(blk.members)-1]]+q.x*blk.bmax))-start <= bucket {
			continue // nothing better than best, or all of it within the bucket
		}
		// Members whose upper bound is within the bucket are in it: skip them.
		j, _ := slices.BinarySearchFunc(blk.members, start, func(i int32, start load.Millis) int {
			if load.Millis(upper(q.p.a[i]+q.x*blk.bmax))-start <= bucket {
				return -1
			}
			return 1
		})
		for _, i := range blk.members[j:] {
			if lower(q.p.a[i]+q.x*blk.bmin) >= best {
				break
			}
			if q.skipped(i) {
				continue
			}
			if t := q.exact(i); t.IsFinite() && t-start > bucket && float64(t) < best {
				best = float64(t)
			}
		}
	}
	return load.Millis(best)
}

// unlocked appends the unmarked and held candidates whose finite estimate t has
// t − start ≤ bucket to sc, or reports false (sc unchanged) when the bounds admit more
// than limit of them. Either way it leaves in ix.cum, per block, how many candidates the
// held ones and the blocks up to it admit (see admittedAt).
func (q *query) unlocked(sc []scored, start, bucket load.Millis, limit int) ([]scored, bool) {
	ends, cum := q.ix.ends[:0], q.ix.cum[:0]
	admitted := len(q.held)
	in := func(i int32, bmin float64) bool { return load.Millis(lower(q.p.a[i]+q.x*bmin))-start <= bucket }
	for k := range q.p.blocks {
		blk := &q.p.blocks[k]
		var end int
		switch m := blk.members; {
		case len(m) == 0 || !in(m[0], blk.bmin):
		case in(m[len(m)-1], blk.bmin):
			end = len(m)
		default:
			end, _ = slices.BinarySearchFunc(m, start, func(i int32, _ load.Millis) int {
				if in(i, blk.bmin) {
					return -1
				}
				return 1
			})
		}
		admitted += end
		ends, cum = append(ends, int32(end)), append(cum, admitted)
	}
	q.ix.ends, q.ix.cum = ends, cum
	if admitted > limit {
		return sc, false
	}
	for _, h := range q.held {
		if h.ttft.IsFinite() && h.ttft-start <= bucket {
			sc = append(sc, h)
		}
	}
	for k, end := range ends {
		for _, i := range q.p.blocks[k].members[:end] {
			if q.skipped(i) {
				continue
			}
			est := q.s.Candidates[i].Estimate(q.r, 1, q.ix.ignore)
			if est.TTFT.IsFinite() && est.TTFT-start <= bucket {
				sc = append(sc, scoredOf(i, est, 1))
			}
		}
	}
	return sc, true
}

// admitted is how many candidates the last unlocked admitted (held ones included).
func (q *query) admitted() int {
	if len(q.ix.cum) == 0 {
		return len(q.held)
	}
	return q.ix.cum[len(q.ix.cum)-1]
}

// admittedAt is the candidate at position pos of the admitted ones: the held ones (their
// entries, already estimated: held is set), then each block's admitted members.
func (q *query) admittedAt(pos int) (i int32, entry scored, held bool) {
	if pos < len(q.held) {
		return q.held[pos].idx, q.held[pos], true
	}
	k, _ := slices.BinarySearch(q.ix.cum, pos+1) // the first block whose count exceeds pos
	before := len(q.held)
	if k > 0 {
		before = q.ix.cum[k-1]
	}
	return q.p.blocks[k].members[pos-before], scored{}, false
}

// evaluateIndexed is evaluate over every candidate by the index (see the file comment);
// ok is false when it leaves this decision to the straightforward scan.
func (c *wawConfig) evaluateIndexed(ws *wawScratch, rng Rand, s *Snapshot, r *Request, price pricing, sloElapsed time.Duration, budget load.Millis) (_ Decision, ok bool) {
	if ws.index == nil {
		ws.index = &ttftIndex{}
	}
	ix := ws.index
	ix.sync(s, c)
	q := query{ix: ix, p: ix.prio(r.Priority), s: s, r: r, x: float64(r.InputTokens), last: -1}
	limit := load.Infinite
	if c.hasQueueSLO {
		// The index decides only when the queue SLO drops no candidate; else the scan.
		if limit = c.queueLimit(r, sloElapsed); load.Millis(q.p.queues.max()) > limit {
			return Decision{}, false
		}
	}
	ix.stamp++
	if ix.stamp == 0 { // wrapped: forget every old mark
		clear(ix.mark)
		ix.stamp = 1
	}
	remaining := len(s.Candidates)
	ix.excl, ix.exclCap = ix.excl[:0], ix.exclCap[:0]
	for _, id := range r.Excluded {
		if i, found := ix.byID[id]; found && !q.skipped(i) {
			ix.mark[i] = ix.stamp
			ix.excl = append(ix.excl, i)
			if ix.capable[i] {
				ix.exclCap = append(ix.exclCap, i)
			}
			remaining--
		}
	}
	if remaining == 0 {
		return Unavailable(ReasonAllExcluded), true
	}
	slices.Sort(ix.exclCap)
	infinite := q.p.outside
	for _, i := range ix.excl {
		if q.p.block[i] < 0 {
			infinite--
		}
	}
	ix.held = ix.held[:0]
	for _, h := range price.held {
		if q.skipped(h.idx) {
			continue // excluded, or listed twice
		}
		ix.mark[h.idx] = ix.stamp
		if q.p.block[h.idx] < 0 {
			infinite--
		}
		est := s.Candidates[h.idx].Estimate(r, h.scale, c.ignore)
		if est.Queue > limit { // priced behind its session's prompt: over the SLO
			return Decision{}, false
		}
		ix.held = append(ix.held, scoredOf(h.idx, est, h.scale))
		if !est.TTFT.IsFinite() {
			infinite++
		}
	}
	q.held = ix.held
	fastest := q.fastest()
	if !fastest.IsFinite() {
		return Unavailable(ReasonNoFiniteTTFT), true
	}
	if infinite == 0 && !q.above(fastest, c.bucket, false) {
		// One bucket holds every candidate: the open ones in snapshot order.
		return c.sampleInOrder(ws, rng, s, r, price), true
	}
	start, wait := fastest, time.Duration(0)
	for step := 0; ; step++ {
		if step == maxIndexSteps {
			return Decision{}, false
		}
		t := q.next(start, c.bucket)
		if !t.IsFinite() {
			break
		}
		need := (t - start) * load.Millis(c.unlockFactor)
		if budget < need {
			if q.above(start, c.bucket, true) {
				wait = (need - budget).Duration()
			}
			break
		}
		budget -= need
		start = t
	}
	if sc, listed := q.unlocked(ws.sc[:0], start, c.bucket, materializeLimit); listed {
		return c.chooseListed(ws, rng, s, r, sc, wait), true
	}
	if ix.capTree.total-len(ix.exclCap) <= materializeLimit {
		// Few open candidates: list them instead.
		return c.chooseListed(ws, rng, s, r, q.openUnlocked(ws.sc[:0], price, start, c.bucket), wait), true
	}
	if d, sampled := c.sampleByRejection(ws, &q, rng, start, wait); sampled {
		return d, true
	}
	// Too few found by rejection: list the unlocked candidates after all (the draws
	// spent make this sample, like the rejection's, not the scan's for the same draws).
	ix.diverged++
	sc, _ := q.unlocked(ws.sc[:0], start, c.bucket, math.MaxInt)
	return c.chooseListed(ws, rng, s, r, sc, wait), true
}

// chooseListed is the scan's choice among the listed unlocked candidates sc: sorted by
// (TTFT, cluster id), those with capacity sampled and compared.
func (c *wawConfig) chooseListed(ws *wawScratch, rng Rand, s *Snapshot, r *Request, sc []scored, wait time.Duration) Decision {
	ws.sc = sc
	sortScored(s, sc)
	open := openOf(s, sc, c.maxQueued)
	if len(open) == 0 {
		return noneOpen(wait)
	}
	return selectedAt(c.best(rng, s, r, open))
}

// openUnlocked appends the open (capable, not excluded) candidates whose finite estimate t
// has t − start ≤ bucket to sc.
func (q *query) openUnlocked(sc []scored, price pricing, start, bucket load.Millis) []scored {
	ix := q.ix
	for o := range ix.capTree.total - len(ix.exclCap) {
		if x := ix.scoredAt(q.s, q.r, price, ix.selectOpen(o)); x.ttft.IsFinite() && x.ttft-start <= bucket {
			sc = append(sc, x)
		}
	}
	return sc
}

// sampleInOrder is the decision when one bucket holds every candidate: the comparator
// over c.n of the open (capable, not excluded) candidates drawn as best draws them from
// the list of the open candidates in snapshot order, without listing them.
func (c *wawConfig) sampleInOrder(ws *wawScratch, rng Rand, s *Snapshot, r *Request, price pricing) Decision {
	ix := ws.index
	m := ix.capTree.total - len(ix.exclCap)
	if m == 0 {
		return Unavailable(ReasonNoCapacity)
	}
	k := min(c.n, m)
	swaps := ix.swaps[:0]
	at := func(p int) int {
		for _, sw := range swaps {
			if sw.pos == p {
				return sw.val
			}
		}
		return p
	}
	put := func(p, v int) {
		for j := range swaps {
			if swaps[j].pos == p {
				swaps[j].val = v
				return
			}
		}
		swaps = append(swaps, swap{pos: p, val: v})
	}
	for i := range k { // best's partial Fisher–Yates, on positions
		j := i + rng.IntN(m-i)
		vi, vj := at(i), at(j)
		put(i, vj)
		put(j, vi)
	}
	sample := ws.sc[:0]
	for i := range k {
		sample = append(sample, ix.scoredAt(s, r, price, ix.selectOpen(at(i))))
	}
	ix.swaps, ws.sc = swaps, sample
	return selectedAt(c.pick(s, r, sample))
}

// sampleByRejection is the decision when the unlocked buckets hold more candidates than
// the index lists: c.n distinct open candidates with t − start ≤ bucket drawn uniformly by
// rejection among the candidates the bounds admitted (a superset), then the comparator.
// It is the same distribution as the scan's sample; ok is false (the caller lists them)
// when too few are found in a bounded number of draws.
func (c *wawConfig) sampleByRejection(ws *wawScratch, q *query, rng Rand, start load.Millis, wait time.Duration) (_ Decision, ok bool) {
	ix := q.ix
	if ix.capTree.total-len(ix.exclCap) == 0 {
		return noneOpen(wait), true
	}
	admitted := q.admitted()
	sample, drawn := ws.sc[:0], ix.drawn[:0]
	for d := 0; d < 32*c.n+64 && len(sample) < c.n; d++ {
		i, x, held := q.admittedAt(rng.IntN(admitted))
		if (!held && q.skipped(i)) || !ix.capable[i] || slices.Contains(drawn, i) {
			continue
		}
		drawn = append(drawn, i)
		if !held {
			x = scoredOf(i, q.s.Candidates[i].Estimate(q.r, 1, ix.ignore), 1)
		}
		if x.ttft.IsFinite() && x.ttft-start <= c.bucket {
			sample = append(sample, x)
		}
	}
	ws.sc, ix.drawn = sample, drawn
	if len(sample) < c.n {
		return Decision{}, false
	}
	ix.diverged++
	return selectedAt(c.pick(q.s, q.r, sample)), true
}

// scoredAt is candidate i's estimate at its price.
func (ix *ttftIndex) scoredAt(s *Snapshot, r *Request, price pricing, i int32) scored {
	scale := price.of(i)
	return scoredOf(i, s.Candidates[i].Estimate(r, scale, ix.ignore), scale)
}

// selectOpen is the o-th (from 0) capable candidate that is not excluded, in snapshot
// order.
func (ix *ttftIndex) selectOpen(o int) int32 {
	e := 0
	for {
		i := int32(ix.capTree.find(o + e))           //nolint:gosec // a candidate index
		n, _ := slices.BinarySearch(ix.exclCap, i+1) // excluded capable ones up to i
		if n == e {
			return i
		}
		e = n
	}
}

// maxTree keeps the greatest of n values under updates (a segment tree, built bottom-up:
// t[n+i] holds value i, t[j] the greater of t[2j] and t[2j+1]).
type maxTree struct {
	t []float64
	n int
}

// leaves sizes the tree for n values and returns them to fill before build.
func (m *maxTree) leaves(n int) []float64 {
	m.n = n
	m.t = slices.Grow(m.t[:0], 2*n)[:2*n]
	return m.t[n:]
}

func (m *maxTree) build() {
	for j := m.n - 1; j >= 1; j-- {
		m.t[j] = max(m.t[2*j], m.t[2*j+1])
	}
}

func (m *maxTree) set(i int, v float64) {
	j := m.n + i
	m.t[j] = v
	for j > 1 {
		j /= 2
		m.t[j] = max(m.t[2*j], m.t[2*j+1])
	}
}

// max is the greatest value (n ≥ 1).
func (m *maxTree) max() float64 { return m.t[1] }

// fenwick counts set flags by prefix (a binary indexed tree) and finds the k-th set one.
type fenwick struct {
	t     []int // 1-based
	total int
}

func (f *fenwick) build(flags []bool) {
	n := len(flags)
	f.t = slices.Grow(f.t[:0], n+1)[:n+1]
	clear(f.t)
	f.total = 0
	for i, v := range flags {
		if v {
			f.t[i+1]++
			f.total++
		}
	}
	for i := 1; i <= n; i++ {
		if j := i + i&-i; j <= n {
			f.t[j] += f.t[i]
		}
	}
}

func (f *fenwick) add(i, d int) {
	for j := i + 1; j < len(f.t); j += j & -j {
		f.t[j] += d
	}
	f.total += d
}

// find is the index (from 0) of the k-th (from 0) set flag; k < total.
func (f *fenwick) find(k int) int {
	n := len(f.t) - 1
	pos, rem := 0, k+1
	for step := 1 << (bits.Len(uint(n)) - 1); step > 0; step >>= 1 {
		if next := pos + step; next <= n && f.t[next] < rem {
			pos = next
			rem -= f.t[next]
		}
	}
	return pos
}

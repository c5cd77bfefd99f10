package dispatch

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds and pace of the TTFT correction (docs/routing.md, "TTFT estimate accuracy").
const (
	// MinTTFTCorrection and MaxTTFTCorrection bound the learned factor: a cluster's
	// estimates are at most halved and at most quadrupled, whatever it reports.
	MinTTFTCorrection = 0.5
	MaxTTFTCorrection = 4.0
	// TTFTCorrectionWarmup is how many observations a correction needs before it applies.
	TTFTCorrectionWarmup = 5
	// TTFTCorrectionMemory is the pace of forgetting: each observation multiplies the weight
	// of the earlier ones by 1 − 1/TTFTCorrectionMemory, so the last ~20 observations
	// dominate and a cluster whose ratio changed is corrected anew within about as many.
	TTFTCorrectionMemory = 20
	// ttftMinModeShare is the least share of the (decayed) observations the most common
	// ratio must hold for a correction to apply: without a clear typical ratio there is
	// nothing systematic to correct.
	ttftMinModeShare = 0.3
)

// The log(observed/estimated) histogram of a TTFTCorrection: ttftBins bins of equal width
// over [ln 1/64, ln 16]; ratios beyond count in the edge bins.
const (
	ttftBins   = 48
	ttftLogMin = -4.1588830833596715 // ln(1/64)
	ttftLogMax = 2.772588722239781   // ln(16)
)

// The typical ratio is looked for only among the bins from MinTTFTCorrection/2 up
// (ttftModeFirst on): a population of answers far faster than estimated (from the
// engine's cache, in a few percent of the estimate, piling into the lowest bin) is no
// correction's, however many they are; they only dilute the share of the typical ratio.
// A cluster far slower than estimated is corrected by MaxTTFTCorrection.
var ttftModeFirst = ttftBin(math.Log(MinTTFTCorrection / 2))

// ttftBin is the histogram bin of log ratio r (the edge bins hold the ratios beyond).
func ttftBin(r float64) int {
	i := int((r - ttftLogMin) / (ttftLogMax - ttftLogMin) * ttftBins)
	return min(max(i, 0), ttftBins-1)
}

// TTFTCorrection learns by how much one cluster's TTFT estimates are off: the factor by
// which to multiply an estimate so that it matches the time to first byte the gateway
// observes. It keeps a histogram of log(observed/estimated) whose older observations fade
// (TTFTCorrectionMemory), and its factor is the typical ratio: the mean of the
// observations in the densest three neighbouring bins (about ±25 % wide) from
// MinTTFTCorrection/2 up, within [MinTTFTCorrection, MaxTTFTCorrection].
//
// The typical ratio, not the mean or the median, because the observations of a cluster
// are often two populations: on a prefix-reusing workload the engine has the prompt cached
// for some requests and prefills them in a fraction of the estimated time, and the
// estimate, which cannot know the engine's cache, is right for the others. A mean or a
// median lands between the two, where the factor fits neither; the densest ratio keeps
// the estimates that were right right and corrects a systematic error (a cluster slower
// than its load reports say) as soon as it becomes the typical one. Without a typical
// ratio (the densest bins hold less than ttftMinModeShare of the observations) nothing is
// corrected.
//
// It is pure: no clock, no I/O. The zero value has no observations and corrects nothing.
type TTFTCorrection struct {
	weight [ttftBins]float64 // decayed count of observations per bin
	sum    [ttftBins]float64 // decayed sum of their log ratios
	total  float64           // decayed count of all observations
	n      uint32
	factor float64 // the current factor (0 until warm)
}

// Observe learns from one attempt's uncorrected estimate and its observed time to first
// byte. An observation without a positive estimate and observation is ignored.
func (c *TTFTCorrection) Observe(estimated, observed time.Duration) {
	if estimated <= 0 || observed <= 0 {
		return
	}
	r := math.Log(float64(observed) / float64(estimated))
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return
	}
	const keep = 1 - 1.0/TTFTCorrectionMemory
	for i := range c.weight {
		c.weight[i] *= keep
		c.sum[i] *= keep
	}
	i := ttftBin(r)
	c.weight[i]++
	c.sum[i] += r
	c.total = c.total*keep + 1
	if c.n < math.MaxUint32 {
		c.n++
	}
	c.factor = c.typical()
}

// typical is the factor of the densest three neighbouring bins within the admissible
// band, or 0 (none) when they hold too small a share (or before the warm-up).
func (c *TTFTCorrection) typical() float64 {
	if c.n < TTFTCorrectionWarmup {
		return 0
	}
	best, bestW, bestS := -1, 0.0, 0.0
	for i := ttftModeFirst; i < ttftBins; i++ {
		w, s := c.weight[i], c.sum[i]
		if i > ttftModeFirst {
			w, s = w+c.weight[i-1], s+c.sum[i-1]
		}
		if i < ttftBins-1 {
			w, s = w+c.weight[i+1], s+c.sum[i+1]
		}
		if w > bestW {
			best, bestW, bestS = i, w, s
		}
	}
	if best < 0 || bestW < ttftMinModeShare*c.total {
		return 0
	}
	return min(max(math.Exp(bestS/bestW), MinTTFTCorrection), MaxTTFTCorrection)
}

// Observations is the number of observations c has learned from.
func (c *TTFTCorrection) Observations() int { return int(c.n) }

// Factor is the multiplier for c's estimates: 1 until TTFTCorrectionWarmup observations
// and without a typical ratio, else the typical ratio within [MinTTFTCorrection,
// MaxTTFTCorrection].
func (c *TTFTCorrection) Factor() float64 {
	if c.factor == 0 {
		return 1
	}
	return c.factor
}

// ttftCell is the live TTFT correction of one (routing target, cluster). The scheduler
// owns it: it reads the factor for every decision and resets the cell when the cluster's
// backends change. Requests feed it their observations (Feedback.Observe) from their own
// goroutines, hence the lock; the factor is also published in an atomic so the
// scheduler's reads take no lock.
type ttftCell struct {
	mu sync.Mutex
	c  TTFTCorrection
	// cached learns from the discounted estimates alone (a prefix expected cached):
	// lb.Candidate.CachedCorrection.
	cached TTFTCorrection
	gen    uint64 // bumped by reset: observations of estimates made before are dropped
	// factor holds math.Float64bits of the correction's typical ratio once it has one
	// (after TTFTCorrectionWarmup observations, a ratio holding enough of them), 0 while
	// it has none: not known, and the scheduler then uses its peers' factor. A cluster
	// whose observations show no typical ratio is as unknown as a new one: left at 1 next
	// to peers corrected to 0.5 it would look twice as slow and get no traffic.
	factor atomic.Uint64
	// cachedFactor is factor's counterpart for cached.
	cachedFactor atomic.Uint64
	// changed, when set, is the queue the cell joins when either factor changes (once
	// until the scheduler drains it: queued); idx is the cell's index in its scheduler's
	// cells, set at each rebuild of the snapshot.
	changed *changedCells
	queued  atomic.Bool
	idx     int
}

// newTTFTCell is a cell that joins changed (when not nil) whenever its factors change.
func newTTFTCell(changed *changedCells) *ttftCell { return &ttftCell{changed: changed, idx: -1} }

// publish stores a factor's bits in dst and queues the cell when they changed.
func (cell *ttftCell) publish(dst *atomic.Uint64, factor float64) {
	bits := math.Float64bits(factor)
	if dst.Swap(bits) != bits && cell.changed != nil && !cell.queued.Swap(true) {
		cell.changed.push(cell)
	}
}

// changedCells is the queue of the correction cells whose factors changed since their
// scheduler last read them: cells join it from the requests' goroutines, the scheduler
// drains it before a decision (Scheduler.correct).
type changedCells struct {
	mu    sync.Mutex
	cells []*ttftCell
}

func (q *changedCells) push(cell *ttftCell) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cells = append(q.cells, cell)
}

// drain moves the queued cells to dst (reused) and marks them not queued: a change after
// this joins the queue again.
func (q *changedCells) drain(dst []*ttftCell) []*ttftCell {
	q.mu.Lock()
	dst = append(dst[:0], q.cells...)
	clear(q.cells)
	q.cells = q.cells[:0]
	q.mu.Unlock()
	for _, cell := range dst {
		cell.queued.Store(false) // before its factors are read
	}
	return dst
}

// learned is the cell's current multiplier, or 0 while it has none: too few observations,
// or no typical ratio among them (the scheduler then uses its peers' factor: see correct).
func (cell *ttftCell) learned() float64 { return math.Float64frombits(cell.factor.Load()) }

// learnedCached is learned's counterpart for discounted estimates.
func (cell *ttftCell) learnedCached() float64 {
	return math.Float64frombits(cell.cachedFactor.Load())
}

// generation is the cell's current generation (read by the scheduler, its only writer).
func (cell *ttftCell) generation() uint64 {
	cell.mu.Lock()
	defer cell.mu.Unlock()
	return cell.gen
}

// reset forgets what the cell learned: the cluster is not the one it learned about.
func (cell *ttftCell) reset() {
	cell.mu.Lock()
	defer cell.mu.Unlock()
	cell.c, cell.cached = TTFTCorrection{}, TTFTCorrection{}
	cell.gen++
	cell.publish(&cell.factor, 0)
	cell.publish(&cell.cachedFactor, 0)
}

// observe learns from one observation of an estimate made at generation gen (cached: a
// discounted estimate).
func (cell *ttftCell) observe(gen uint64, estimated, observed time.Duration, cached bool) {
	cell.mu.Lock()
	defer cell.mu.Unlock()
	if gen != cell.gen {
		return
	}
	if cached {
		cell.cached.Observe(estimated, observed)
		cell.publish(&cell.cachedFactor, cell.cached.factor)
		return
	}
	cell.c.Observe(estimated, observed)
	cell.publish(&cell.factor, cell.c.factor)
}

// state returns the cell's factor and observation count (for /debug/state).
func (cell *ttftCell) state() CorrectionState {
	cell.mu.Lock()
	defer cell.mu.Unlock()
	return CorrectionState{
		Factor: cell.c.Factor(), Observations: cell.c.Observations(),
		CachedFactor: cell.cached.Factor(), CachedObservations: cell.cached.Observations(),
	}
}

// Feedback takes one granted attempt's observed time to first byte back to the TTFT
// correction of the (routing target, cluster) whose estimate it was. The zero value
// discards observations. Feed it only attempts that succeeded: a failed, retried or
// aborted attempt says nothing about the cluster's time to first byte.
type Feedback struct {
	cell *ttftCell
	gen  uint64
	// raw is the estimate without the correction: what the correction learns about;
	// cached says it was discounted (it teaches the cached class).
	raw    time.Duration
	cached bool
}

// Observe records the attempt's observed time to first byte (cheap; safe from any
// goroutine). An observation that arrives after the cluster's backends changed is
// dropped.
func (f Feedback) Observe(observed time.Duration) {
	if f.cell != nil {
		f.cell.observe(f.gen, f.raw, observed, f.cached)
	}
}

// poolHysteresis is by how much (relative) the cold clusters' pooled correction may drift
// before they are given the new one between whole rebuilds of the snapshot.
const poolHysteresis = 0.01

// pooledFactors is one class of corrections (of full prefills, or of discounted ones) of
// a snapshot's candidates: the factors their cells learned and the geometric mean of the
// learned ones, which the cold candidates carry.
type pooledFactors struct {
	own    []float64 // per candidate: its cell's factor, 0 when none is learned
	logSum float64   // of the learned factors
	warm   int       // candidates with a learned factor
	pooled float64   // what the cold candidates carry (0: nothing is learned)
}

func (p *pooledFactors) reset(n int) {
	p.own = slices.Grow(p.own[:0], n)[:n]
	clear(p.own)
	p.logSum, p.warm, p.pooled = 0, 0, 0
}

// set makes f candidate i's learned factor.
func (p *pooledFactors) set(i int, f float64) {
	if old := p.own[i]; old > 0 {
		p.logSum -= math.Log(old)
		p.warm--
	}
	if f > 0 {
		p.logSum += math.Log(f)
		p.warm++
	}
	p.own[i] = f
}

// repool takes the current mean as the cold candidates' factor when it moved from theirs
// by more than hysteresis (relative), or appeared or vanished; it reports a change.
func (p *pooledFactors) repool(hysteresis float64) bool {
	mean := 0.0
	if p.warm > 0 {
		mean = math.Exp(p.logSum / float64(p.warm))
	}
	if mean == p.pooled || (mean > 0 && p.pooled > 0 && math.Abs(mean/p.pooled-1) <= hysteresis) {
		return false
	}
	p.pooled = mean
	return true
}

// of is candidate i's correction: its own factor, else the pooled one.
func (p *pooledFactors) of(i int) float64 {
	if f := p.own[i]; f > 0 {
		return f
	}
	return p.pooled
}

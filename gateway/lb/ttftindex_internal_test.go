package lb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// withIndexLimits sets the index's size thresholds for one test.
func withIndexLimits(tb testing.TB, minCandidates, listLimit int) {
	tb.Helper()
	oldMin, oldList := indexMinCandidates, materializeLimit
	indexMinCandidates, materializeLimit = minCandidates, listLimit
	tb.Cleanup(func() { indexMinCandidates, materializeLimit = oldMin, oldList })
}

// diverged is how many of ws's decisions the index sampled differently from the scan.
func diverged(ws *wawScratch) int {
	if ws.index == nil {
		return 0
	}
	return ws.index.diverged
}

// drawIndexLoad draws one candidate's load: slopes from few distinct throughputs (ties
// between candidates) and from continuous ones, invalid throughputs, queue maps, full
// engines.
func drawIndexLoad(t *rapid.T, label string) Candidate {
	tps := rapid.SampledFrom([]float64{0, 500, 1000, 1000, 2500, -1}).Draw(t, label+"tps")
	if tps < 0 {
		tps = rapid.Float64Range(100, 50_000).Draw(t, label+"ctps")
	}
	c := Candidate{
		RTT: time.Duration(rapid.SampledFrom([]int64{0, 1, 5, 20}).Draw(t, label+"rtt")) * time.Millisecond,
		Load: load.Load{
			InputTPS:             tps,
			QueuedInputTokens:    rapid.SampledFrom([]uint64{0, 0, 100, 5000}).Draw(t, label+"queued"),
			RunningRequests:      rapid.Uint64Range(0, 6).Draw(t, label+"running"),
			MaxEngineConcurrency: rapid.SampledFrom([]uint64{0, 2, 4}).Draw(t, label+"max"),
		},
	}
	if rapid.Bool().Draw(t, label+"split") {
		c.Load.RequestInputTPS = tps / 2
	}
	if rapid.IntRange(0, 3).Draw(t, label+"map") == 0 {
		c.Load.QueueEstimates = []load.PriorityEstimate{
			{Priority: 0, QueueMs: rapid.Uint64Range(0, 50).Draw(t, label+"q0")},
			{Priority: 2, QueueMs: rapid.Uint64Range(0, 500).Draw(t, label+"q2")},
		}
	}
	if rapid.Bool().Draw(t, label+"corrected") {
		c.Correction = rapid.SampledFrom([]float64{0.5, 1, 1.7}).Draw(t, label+"f")
	}
	return c
}

// TestIndexedDecisionMatchesScan: wait-and-widen's global phase decided by the TTFT index
// is the straightforward scan's decision — the same kind, wait, reason, candidate and
// estimate from the same random draws — on random fleets whose candidates change between
// decisions (followed through Snapshot.Changed), with exclusions, candidates priced apart
// (a session's held clusters) and queue SLOs. Where the unlocked buckets hold more candidates than
// the index lists, the index samples by rejection: the same distribution, not the same
// draws; its choice is then checked to be one the scan could make (an unlocked candidate
// with capacity) and its estimate exact.
func TestIndexedDecisionMatchesScan(t *testing.T) {
	withIndexLimits(t, 1, 128)
	rejected := 0
	rapid.Check(t, func(t *rapid.T) {
		materializeLimit = rapid.SampledFrom([]int{2, 8, 128}).Draw(t, "list_limit")
		n := rapid.IntRange(1, 90).Draw(t, "candidates")
		cands := make([]Candidate, n)
		for i := range cands {
			cands[i] = drawIndexLoad(t, "")
			cands[i].ClusterID = fmt.Sprintf("c%03d", i)
		}
		s := NewSnapshot("", "m", cands)
		e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
		e.BucketSize = time.Duration(rapid.SampledFrom([]int64{0, 1, 20, 200, 1_000_000}).Draw(t, "bucket")) * time.Millisecond
		e.N = rapid.IntRange(1, 4).Draw(t, "n")
		e.MaxQueued = rapid.Uint64Range(0, 2).Draw(t, "max_queued")
		e.UnlockFactor = rapid.SampledFrom([]float64{0, 0.5, 1, 4}).Draw(t, "unlock")
		e.IgnoreQueueTime = rapid.Bool().Draw(t, "ignore_queue")
		e.IgnoreInputProcessingTime = rapid.IntRange(0, 4).Draw(t, "ignore_prefill") == 0
		if rapid.Bool().Draw(t, "tie") {
			e.TieTolerance = 5 * time.Millisecond
		}
		if rapid.Bool().Draw(t, "slo") {
			e.HasQueueSLO = true
			e.QueueFloor = time.Duration(rapid.SampledFrom([]int64{0, 10, 100}).Draw(t, "floor")) * time.Millisecond
			e.QueueCeil = time.Duration(rapid.SampledFrom([]int64{100, 600, 5000}).Draw(t, "ceil")) * time.Millisecond
		}
		cfg := newWAWConfig(e)
		var indexed, scan wawScratch
		for round := range rapid.IntRange(1, 4).Draw(t, "rounds") {
			if round > 0 {
				for range rapid.IntRange(1, 5).Draw(t, "changes") {
					i := rapid.IntRange(0, n-1).Draw(t, "changed")
					id := s.Candidates[i].ClusterID
					s.Candidates[i] = drawIndexLoad(t, "new_")
					s.Candidates[i].ClusterID = id
					s.Changed(i)
				}
			}
			r := &Request{
				InputTokens: rapid.SampledFrom([]uint64{1, 100, 2000, 30_000}).Draw(t, "input"),
				Priority:    rapid.Uint32Range(0, 3).Draw(t, "priority"),
				SLO:         time.Duration(rapid.SampledFrom([]int64{0, 50, 1000}).Draw(t, "request_slo")) * time.Millisecond,
			}
			for range rapid.IntRange(0, 3).Draw(t, "excluded") {
				r.Excluded = append(r.Excluded, fmt.Sprintf("c%03d", rapid.IntRange(0, n).Draw(t, "excluded_id")))
			}
			price := fullPrice
			if k := rapid.IntRange(0, 3).Draw(t, "held"); k > 0 {
				price = pricing{scale: 1, only: -1, patient: true}
				for range k {
					price.held = append(price.held, heldScale{
						idx:   int32(rapid.IntRange(0, n-1).Draw(t, "held_idx")),
						scale: rapid.SampledFrom([]float64{0, 0.3, 1}).Draw(t, "held_scale"),
					})
				}
			}
			budget := time.Duration(rapid.SampledFrom([]int64{0, 3, 50, 1000, 100_000}).Draw(t, "budget")) * time.Millisecond
			seed := rapid.Uint64().Draw(t, "seed")

			before := diverged(&indexed)
			got := cfg.evaluate(&indexed, rand.New(rand.NewPCG(seed, 1)), s, r, nil, price, budget, budget, -1)
			indexMinCandidates = math.MaxInt
			want := cfg.evaluate(&scan, rand.New(rand.NewPCG(seed, 1)), s, r, nil, price, budget, budget, -1)
			open := scanOpen(&cfg, s, r, price, budget)
			indexMinCandidates = 1

			if diverged(&indexed) == before || got.Kind != KindSelected || want.Kind != KindSelected {
				if got != want {
					t.Fatalf("round %d: indexed %+v, scan %+v", round, got, want)
				}
				continue
			}
			rejected++
			x, ok := open[int32(got.Index)]
			if !ok {
				t.Fatalf("round %d: indexed chose %d, not among the scan's open candidates %v", round, got.Index, open)
			}
			if got.TTFT != x.cmpv {
				t.Fatalf("round %d: estimate %v, want %v", round, got.TTFT, x.cmpv)
			}
		}
	})
	if rejected == 0 {
		t.Error("no decision was sampled by rejection: that path went untested")
	}
}

// scanOpen is the set of candidates the straightforward scan samples from for a
// Selected decision: the unlocked ones with capacity.
func scanOpen(c *wawConfig, s *Snapshot, r *Request, price pricing, budget time.Duration) map[int32]scored {
	sc, _ := c.collect(nil, s, r, nil, price, budget)
	open := map[int32]scored{}
	if len(sc) == 0 {
		return open
	}
	fastest, slowest := sc[0].ttft, sc[0].ttft
	for _, x := range sc[1:] {
		fastest, slowest = min(fastest, x.ttft), max(slowest, x.ttft)
	}
	unlocked := len(sc)
	if !slowest.IsFinite() || slowest-fastest > c.bucket {
		unlocked, _ = c.unlock(s, sc, load.MillisOf(budget))
	}
	for _, x := range openOf(s, sc[:unlocked], c.maxQueued) {
		open[x.idx] = x
	}
	return open
}

// The index's position tree finds every set flag by rank.
func TestFenwickFind(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		flags := rapid.SliceOfN(rapid.Bool(), 1, 200).Draw(t, "flags")
		var f fenwick
		f.build(flags)
		for range rapid.IntRange(0, 20).Draw(t, "flips") {
			i := rapid.IntRange(0, len(flags)-1).Draw(t, "flip")
			flags[i] = !flags[i]
			f.add(i, boolDelta(flags[i]))
		}
		var set []int
		for i, v := range flags {
			if v {
				set = append(set, i)
			}
		}
		if f.total != len(set) {
			t.Fatalf("total %d, want %d", f.total, len(set))
		}
		for k, want := range set {
			if got := f.find(k); got != want {
				t.Fatalf("find(%d) = %d, want %d (flags %v)", k, got, want, flags)
			}
		}
	})
}

// Where the unlocked buckets hold more candidates than the index lists, its sample (drawn
// by rejection) is uniform over the open ones, as the scan's: with one candidate sampled,
// each of the 298 open candidates is chosen 1/298 of the time, within 25 %; the excluded, the
// full and the one of infinite estimate never.
func TestRejectionSampleIsUniform(t *testing.T) {
	const n = 320
	cands := make([]Candidate, n)
	for i := range cands {
		cands[i] = Candidate{
			ClusterID: fmt.Sprintf("c%03d", i),
			RTT:       time.Duration(i%5) * time.Millisecond,
			Load:      load.Load{InputTPS: 1000 + float64(i%7), MaxEngineConcurrency: 4, RunningRequests: uint64(i % 3)},
		}
	}
	cands[0].Load.InputTPS = 0 // an infinite estimate: more than one bucket
	for i := 1; i <= 20; i++ {
		cands[i].Load.RunningRequests = 4 // full
	}
	s := NewSnapshot("", "m", cands)
	e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
	e.BucketSize, e.N = time.Second, 1
	cfg := newWAWConfig(e)
	r := &Request{InputTokens: 100, Excluded: []string{"c021"}}
	var ws wawScratch
	rng := rand.New(rand.NewPCG(3, 4))
	const open, per = n - 22, 400
	counts := make([]int, n)
	for range open * per {
		d := cfg.evaluate(&ws, rng, s, r, nil, fullPrice, 0, 0, -1)
		if d.Kind != KindSelected {
			t.Fatalf("decision %+v", d)
		}
		counts[d.Index]++
	}
	if diverged(&ws) != open*per {
		t.Fatalf("%d of %d decisions sampled by rejection, want all", diverged(&ws), open*per)
	}
	for i, c := range counts {
		switch {
		case i <= 21:
			if c != 0 {
				t.Errorf("candidate %d (infinite, full or excluded) chosen %d times", i, c)
			}
		case c < per*3/4 || c > per*5/4:
			t.Errorf("candidate %d chosen %d times, want %d ± 25 %%", i, c, per)
		}
	}
}

// The queue SLO's tree keeps the greatest queue under updates.
func TestMaxTree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		values := rapid.SliceOfN(rapid.Float64Range(0, 1000), 1, 100).Draw(t, "values")
		var m maxTree
		copy(m.leaves(len(values)), values)
		m.build()
		for range rapid.IntRange(0, 20).Draw(t, "updates") {
			i := rapid.IntRange(0, len(values)-1).Draw(t, "i")
			values[i] = rapid.Float64Range(0, 1000).Draw(t, "v")
			m.set(i, values[i])
		}
		if got, want := m.max(), slices.Max(values); got != want {
			t.Fatalf("max %v, want %v", got, want)
		}
	})
}

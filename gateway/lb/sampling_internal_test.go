package lb

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Property: power-of-n's sample, drawn without scanning on large snapshots, is
// sample_count distinct non-excluded candidates (every eligible one when there are no
// more), and the decision is the one the straightforward rule takes on that sample: a
// sampled candidate whose comparator score is the minimum of the sample (within the tie
// tolerance), with that candidate's TTFT estimate.
func TestPowerOfNSampleProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 300).Draw(t, "n")
		cs := make([]Candidate, n)
		for i := range cs {
			cs[i] = Candidate{
				ClusterID: fmt.Sprintf("c%03d", i),
				RTT:       time.Duration(rapid.IntRange(0, 50).Draw(t, "rtt_ms")) * time.Millisecond,
				Load: load.Load{
					InputTPS:             rapid.SampledFrom([]float64{100, 1000, 20_000}).Draw(t, "tps"),
					QueuedInputTokens:    rapid.Uint64Range(0, 5000).Draw(t, "queued"),
					QueueSize:            rapid.Uint64Range(0, 5).Draw(t, "qsize"),
					RunningRequests:      rapid.Uint64Range(0, 8).Draw(t, "running"),
					MaxEngineConcurrency: 8,
				},
			}
		}
		s := NewSnapshot("", "m", cs)
		r := &Request{InputTokens: rapid.Uint64Range(0, 4000).Draw(t, "input")}
		// A short list, as on a retried request, or most of a small snapshot.
		for range rapid.IntRange(0, min(n, 8)).Draw(t, "excluded") {
			r.Excluded = append(r.Excluded, cs[rapid.IntRange(0, n-1).Draw(t, "ex")].ClusterID)
		}
		e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
		e.SampleCount = rapid.IntRange(1, 12).Draw(t, "sample")
		e.Comparator = rapid.SampledFrom([]load.Comparator{load.ComparatorTTFT, load.ComparatorQueueTime, load.ComparatorUtilization, load.ComparatorNumRequestsQueued}).Draw(t, "comparator")
		if e.Comparator == load.ComparatorTTFT && rapid.Bool().Draw(t, "tie") {
			e.TieTolerance = 5 * time.Millisecond
		}
		b := newPowerOfN(e, rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 7))).(*powerOfN)
		eligible := countEligible(s, r)
		d := b.Decide(s, r, 0)
		if eligible == 0 {
			if d != Unavailable(ReasonAllExcluded) {
				t.Fatalf("every candidate excluded: %v", d)
			}
			return
		}
		sample := b.eligible[:min(e.SampleCount, len(b.eligible))]
		if len(sample) != min(e.SampleCount, eligible) {
			t.Fatalf("sample of %d, want min(%d, %d eligible)", len(sample), e.SampleCount, eligible)
		}
		seen := map[int32]bool{}
		for _, i := range sample {
			if seen[i] || r.IsExcluded(cs[i].ClusterID) {
				t.Fatalf("sample %v: duplicate or excluded %d", sample, i)
			}
			seen[i] = true
		}
		if d.Kind != KindSelected || !slices.Contains(sample, int32(d.Index)) {
			t.Fatalf("decision %v outside the sample %v", d, sample)
		}
		score := func(i int) (float64, load.Millis) {
			est := cs[i].Estimate(r, 1, load.Ignore{})
			return e.Comparator.Score(&cs[i].Load, est, r.InputTokens), est.TTFT
		}
		got, ttft := score(d.Index)
		if ttft != d.TTFT {
			t.Fatalf("decision TTFT %v, candidate's estimate %v", d.TTFT, ttft)
		}
		for _, i := range sample {
			if other, _ := score(int(i)); other+float64(load.MillisOf(e.TieTolerance)) < got {
				t.Fatalf("picked %d (score %v) over sampled %d (score %v)", d.Index, got, i, other)
			}
		}
	})
}

// Property: unlock, which partitions bucket by bucket and sorts only what it unlocks, gives
// the straightforward sort-and-walk's result: the same unlocked count, the same unlocked
// entries in the same (TTFT, cluster id) order and the same wait — with ties, infinite
// estimates, full candidates and budgets that open many buckets (past the partition steps).
func TestUnlockMatchesSortedWalk(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 80).Draw(t, "n")
		cs := make([]Candidate, n)
		sc := make([]scored, n)
		for i := range cs {
			cs[i] = Candidate{ClusterID: fmt.Sprintf("c%03d", rapid.IntRange(0, 999).Draw(t, "id"))}
			cs[i].ClusterID += fmt.Sprint("-", i) // distinct, in no particular order
			cs[i].Load.MaxEngineConcurrency = 2
			cs[i].Load.RunningRequests = rapid.Uint64Range(0, 3).Draw(t, "running")
			ttft := load.Millis(rapid.IntRange(0, 400).Draw(t, "ttft")) / 4
			if rapid.IntRange(0, 9).Draw(t, "inf") == 0 {
				ttft = load.Infinite
			}
			sc[i] = scored{idx: int32(i), ttft: ttft}
		}
		if !slices.ContainsFunc(sc, func(x scored) bool { return x.ttft.IsFinite() }) {
			sc[0].ttft = 1 // evaluate only walks buckets with a finite fastest estimate
		}
		s := NewSnapshot("", "m", cs)
		c := wawConfig{
			bucket:       load.Millis(rapid.IntRange(0, 30).Draw(t, "bucket")),
			unlockFactor: rapid.SampledFrom([]float64{0, 0.25, 1, 2}).Draw(t, "factor"),
			maxQueued:    rapid.Uint64Range(0, 1).Draw(t, "max_queued"),
		}
		budget := load.Millis(rapid.IntRange(0, 200).Draw(t, "budget"))
		want := slices.Clone(sc)
		wantN, wantWait := c.unlockSorted(s, want, budget)
		gotN, gotWait := c.unlock(s, sc, budget)
		if gotN != wantN || gotWait != wantWait {
			t.Fatalf("unlock = (%d, %v), sorted walk = (%d, %v)", gotN, gotWait, wantN, wantWait)
		}
		for i := range gotN {
			if sc[i].idx != want[i].idx {
				t.Fatalf("unlocked entry %d: %d, sorted walk %d", i, sc[i].idx, want[i].idx)
			}
		}
	})
}

// unlockSorted is the straightforward bucket walk: it sorts all of sc by (TTFT, cluster
// id) and walks it from the fastest entry. unlock returns the same.
func (c *wawConfig) unlockSorted(s *Snapshot, sc []scored, budget load.Millis) (unlocked int, next time.Duration) {
	sortScored(s, sc)
	return c.walk(s, sc, 0, sc[0].ttft, budget)
}

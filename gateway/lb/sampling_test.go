package lb_test

import (
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// fleet is n idle candidates c0000…, every one with RTT 1 ms unless rtt sets it.
func fleet(n int, rtt func(i int) float64) []lb.Candidate {
	cs := make([]lb.Candidate, n)
	for i := range cs {
		v := 1.0
		if rtt != nil {
			v = rtt(i)
		}
		cs[i] = idle(fmt.Sprintf("c%04d", i), v)
	}
	return cs
}

// checkFrequencies fails when a count differs from its expected share of total by more than
// tol (relative) for any candidate.
func checkFrequencies(t *testing.T, what string, counts []int, want []float64, total int, tol float64) {
	t.Helper()
	for i, c := range counts {
		exp := want[i] * float64(total)
		if math.Abs(float64(c)-exp) > tol*math.Max(exp, 1) {
			t.Errorf("%s: candidate %d chosen %d times, want %.0f ± %.0f%%", what, i, c, exp, 100*tol)
		}
	}
}

// Random and power-of-n with one sample pick uniformly among the non-excluded candidates,
// drawing without scanning: over many decisions every eligible candidate's share is within
// 10 % of 1/eligible (about 6 standard deviations at these counts), and excluded ones are
// never chosen.
func TestSamplingIsUniform(t *testing.T) {
	t.Parallel()
	const n, perCandidate = 40, 4000
	excluded := []string{"c0003", "c0017", "c0039"}
	s := lb.NewSnapshot("", "m", fleet(n, nil))
	want := make([]float64, n)
	for i := range want {
		if !(&lb.Request{Excluded: excluded}).IsExcluded(fmt.Sprintf("c%04d", i)) {
			want[i] = 1.0 / float64(n-len(excluded))
		}
	}
	one := lbconfig.DefaultEntry(lbconfig.PowerOfN)
	one.SampleCount = 1
	two := lbconfig.DefaultEntry(lbconfig.PowerOfN) // all tied: the pick among the two is at random
	for name, e := range map[string]lbconfig.Entry{"random": lbconfig.DefaultEntry(lbconfig.Random), "power-of-n-1": one, "power-of-n-2-ties": two} {
		b := newBalancer(t, e, seeded())
		counts := make([]int, n)
		total := perCandidate * (n - len(excluded))
		for range total {
			counts[b.Decide(s, &lb.Request{Excluded: excluded}, 0).Index]++
		}
		checkFrequencies(t, name, counts, want, total, 0.1)
	}
}

// Power-of-two-choices on candidates of distinct estimates picks the candidate of rank j
// (0 = fastest) of m with probability 2(m−1−j)/(m(m−1)) — the chance that it is sampled
// together with a slower one — the distribution of the straightforward uniform sample.
func TestPowerOfTwoDistribution(t *testing.T) {
	t.Parallel()
	const n, total = 30, 120_000
	cs := fleet(n, func(i int) float64 { return float64(100 * (1 + (i*7)%n)) }) // RTTs 100 ms apart, shuffled ranks
	s := lb.NewSnapshot("", "m", cs)
	b := newBalancer(t, lbconfig.DefaultEntry(lbconfig.PowerOfN), seeded())
	counts := make([]int, n)
	for range total {
		counts[b.Decide(s, &lb.Request{}, 0).Index]++
	}
	want := make([]float64, n)
	for i := range cs {
		rank := (i * 7) % n
		want[i] = 2 * float64(n-1-rank) / float64(n*(n-1))
	}
	// The slowest candidate is never chosen; the others are within 10 % (≥ 8 standard
	// deviations for the rarest one kept, rank n−2, ~276 expected).
	checkFrequencies(t, "power-of-2", counts, want, total, 0.1)
}

// Property: round-robin never selects an excluded candidate, and with a fixed exclusion
// list it takes every eligible candidate in turn: after k full turns each one has been
// chosen exactly k times, whatever the cursor left by earlier decisions.
func TestRoundRobinTurnsProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 60).Draw(t, "n")
		s := lb.NewSnapshot("", "m", fleet(n, nil))
		b, err := lb.New(lbconfig.DefaultEntry(lbconfig.RoundRobin), firstRand{})
		if err != nil {
			t.Fatal(err)
		}
		for range rapid.IntRange(0, 2*n).Draw(t, "warm") { // move the cursor
			b.Decide(s, &lb.Request{}, 0)
		}
		r := &lb.Request{}
		for range rapid.IntRange(0, n).Draw(t, "excluded") {
			r.Excluded = append(r.Excluded, fmt.Sprintf("c%04d", rapid.IntRange(0, n-1).Draw(t, "ex")))
		}
		eligible := 0
		for i := range n {
			if !r.IsExcluded(fmt.Sprintf("c%04d", i)) {
				eligible++
			}
		}
		if eligible == 0 {
			if d := b.Decide(s, r, 0); d != lb.Unavailable(lb.ReasonAllExcluded) {
				t.Fatalf("every candidate excluded: %v", d)
			}
			return
		}
		turns := rapid.IntRange(1, 3).Draw(t, "turns")
		counts := make([]int, n)
		for range turns * eligible {
			d := b.Decide(s, r, 0)
			if d.Kind != lb.KindSelected || r.IsExcluded(s.Candidates[d.Index].ClusterID) {
				t.Fatalf("decision %v with %v excluded", d, r.Excluded)
			}
			counts[d.Index]++
		}
		for i, c := range counts {
			if want := turns * boolInt(!r.IsExcluded(s.Candidates[i].ClusterID)); c != want {
				t.Fatalf("after %d turns candidate %d chosen %d times, want %d", turns, i, c, want)
			}
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

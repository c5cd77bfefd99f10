package overhead

import (
	"cmp"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"
)

// How exact is one run's ratio? A p99 is set by the slowest 1 % of the requests, a few
// hundred of them, and on a noisy machine two identical proxies measured in the same run
// differ by tens of per cent there. Resampled answers it from the run itself: it redraws
// the run many times from its own rounds (a bootstrap) and recomputes every path's
// quantiles in each draw. A ratio's interval is the spread of its value over the draws.
//
// The draws resample whole rounds, so a round's seven latencies stay together: a burst of
// load that slowed every path in a round slows all of them in a draw too, and cancels out
// of the ratios as it does in the run. Rounds are drawn in blocks of consecutive rounds,
// because the machine's noise comes in spells longer than one round.

// Resampled holds every path's quantiles in each bootstrap draw of a Result.
type Resampled struct {
	// Qs are the quantiles resampled.
	Qs []float64
	// Draws[p][qi][d] is path p's latency at Qs[qi] in draw d.
	Draws [NumPaths][][]time.Duration
}

// Resample draws the result's rounds draws times (in blocks of block consecutive rounds,
// seeded: the same run gives the same intervals) and returns each path's quantiles qs in
// every draw. Every path must have the same number of rounds; otherwise (and for an empty
// run) every draw reads zero, which makes every ratio's interval unbounded.
func (r *Result) Resample(qs []float64, draws, block int, seed uint64) *Resampled {
	n := len(r.Rounds[0])
	out := &Resampled{Qs: qs}
	for p := range out.Draws {
		out.Draws[p] = make([][]time.Duration, len(qs))
		for qi := range qs {
			out.Draws[p][qi] = make([]time.Duration, draws)
		}
	}
	for _, rounds := range r.Rounds {
		if len(rounds) != n {
			n = 0 // not one run's rounds: no draws (every ratio unbounded)
		}
	}
	if n == 0 || draws <= 0 {
		return out
	}
	block = min(max(block, 1), n)
	// rank[p][i] is the position of round i's latency among path p's sorted latencies:
	// a draw counts ranks and reads its quantiles off the cumulative counts, in O(n).
	var rank [NumPaths][]int
	for p := range rank {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		rounds := r.Rounds[p]
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(rounds[a], rounds[b]) })
		rank[p] = make([]int, n)
		for pos, i := range idx {
			rank[p][i] = pos
		}
	}
	// The order statistic each quantile reads, as Quantile does.
	want := make([]int, len(qs))
	for qi, q := range qs {
		want[qi] = int(q * float64(n-1))
	}
	// Each draw has its own generator (seeded with the draw's index), so the draws are the
	// same however they are shared among the workers, one per CPU.
	workers := min(max(runtime.GOMAXPROCS(0), 1), draws)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			picked := make([]int, 0, n+block)
			counts := make([]int, n)
			for d := w; d < draws; d += workers {
				rng := rand.New(rand.NewPCG(seed, uint64(d))) //nolint:gosec // d >= 0
				picked = picked[:0]
				for len(picked) < n {
					start := rng.IntN(n - block + 1)
					for i := start; i < start+block && len(picked) < n; i++ {
						picked = append(picked, i)
					}
				}
				for p := range rank {
					r.readQuantiles(out, p, d, picked, rank[p], counts, want)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// readQuantiles counts the ranks of path p's picked rounds and stores draw d's quantiles
// (the order statistics want) in out.
func (r *Result) readQuantiles(out *Resampled, p, d int, picked, rank, counts, want []int) {
	clear(counts)
	for _, i := range picked {
		counts[rank[i]]++
	}
	seen, qi := 0, 0
	for pos, c := range counts {
		seen += c
		for qi < len(want) && seen > want[qi] {
			out.Draws[p][qi][d] = r.Samples[p][pos]
			qi++
		}
		if qi == len(want) {
			return
		}
	}
}

// Interval is a central confidence interval.
type Interval struct{ Lo, Hi float64 }

// Contains reports whether x lies in the interval.
func (i Interval) Contains(x float64) bool { return i.Lo <= x && x <= i.Hi }

// RatioInterval returns the central interval holding level (e.g. 0.95) of the draws'
// Ratio(component, proxy, baseline) at Qs[qi]. A draw in which the proxy added nothing
// counts as an unbounded ratio.
func (s *Resampled) RatioInterval(component, proxy, baseline, qi int, level float64) Interval {
	c, px, b := s.Draws[component][qi], s.Draws[proxy][qi], s.Draws[baseline][qi]
	if len(c) == 0 {
		return Interval{}
	}
	ratios := make([]float64, len(c))
	for d := range c {
		added, by := c[d]-b[d], px[d]-b[d]
		if by <= 0 {
			ratios[d] = math.Inf(1)
			continue
		}
		ratios[d] = float64(added) / float64(by)
	}
	slices.Sort(ratios)
	tail := (1 - level) / 2
	at := func(q float64) float64 { return ratios[min(int(q*float64(len(ratios))), len(ratios)-1)] }
	return Interval{Lo: at(tail), Hi: at(1 - tail)}
}

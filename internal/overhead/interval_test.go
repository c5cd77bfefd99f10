package overhead_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/overhead"
	"github.com/switchyard/switchyard/internal/overhead/overheadtest"
)

// synthetic returns n rounds of Synthetic seeded with seed. added[p] is path p's mean
// added latency over overhead.Pylon's (0: the path is a baseline).
func synthetic(n int, seed uint64, added [overhead.NumPaths]time.Duration) *overhead.Result {
	return overheadtest.Synthetic(rand.New(rand.NewPCG(seed, 7)), n, added)
}

func hops(proxy, component, control time.Duration) [overhead.NumPaths]time.Duration {
	var a [overhead.NumPaths]time.Duration
	a[overhead.ProxyPylon], a[overhead.GatewayPylon], a[overhead.ControlPylon] = proxy, component, control
	return a
}

// With one block as long as the run, the only possible draw is the run itself: every
// draw's quantiles are the run's.
func TestResampleOfTheWholeRunIsTheRun(t *testing.T) {
	t.Parallel()
	r := synthetic(997, 1, hops(50*time.Microsecond, 60*time.Microsecond, 50*time.Microsecond))
	qs := []float64{0, 0.5, 0.99, 1}
	s := r.Resample(qs, 5, len(r.Rounds[0]), 1)
	for p := range overhead.NumPaths {
		for qi, q := range qs {
			for d, got := range s.Draws[p][qi] {
				if want := r.Quantile(p, q); got != want {
					t.Fatalf("%s q%v draw %d: %v, want the run's %v", overhead.PathNames[p], q, d, got, want)
				}
			}
		}
	}
}

// The interval holds the run's own ratio, leaves out a ratio far from it, covers 1.00×
// for an identical proxy, and narrows as the run grows.
func TestRatioIntervalFindsTheTruthAndNarrowsWithMoreRounds(t *testing.T) {
	t.Parallel()
	us := time.Microsecond
	width := func(n int) (gw, aa [2]overhead.Interval, r *overhead.Result) {
		r = synthetic(n, 3, hops(60*us, 90*us, 60*us))
		s := r.Resample([]float64{0.5, 0.99}, 400, 16, 1)
		for qi := range 2 {
			gw[qi] = s.RatioInterval(overhead.GatewayPylon, overhead.ProxyPylon, overhead.Pylon, qi, 0.95)
			aa[qi] = s.RatioInterval(overhead.ControlPylon, overhead.ProxyPylon, overhead.Pylon, qi, 0.95)
		}
		return gw, aa, r
	}
	gwSmall, _, _ := width(2000)
	gw, aa, r := width(20000)
	for qi, q := range []float64{0.5, 0.99} {
		if own := r.Ratio(overhead.GatewayPylon, overhead.ProxyPylon, overhead.Pylon, q); !gw[qi].Contains(own) {
			t.Errorf("q%v: interval %v leaves out the run's own ratio %.3f", q, gw[qi], own)
		}
		if gw[qi].Contains(1) || gw[qi].Lo < 1.25 {
			t.Errorf("q%v: a component adding 1.5× the proxy's latency got %v", q, gw[qi])
		}
		if !aa[qi].Contains(1) {
			t.Errorf("q%v: the A/A interval %v leaves out 1.00×", q, aa[qi])
		}
		if big, small := gw[qi].Hi-gw[qi].Lo, gwSmall[qi].Hi-gwSmall[qi].Lo; !(big < small) {
			t.Errorf("q%v: 20 000 rounds gave an interval %.3f wide, 2 000 rounds %.3f", q, big, small)
		}
	}
}

// A draw in which the proxy added nothing makes the interval unbounded, not a division
// by zero.
func TestRatioIntervalWithoutProxyLatencyIsUnbounded(t *testing.T) {
	t.Parallel()
	r := synthetic(500, 5, hops(0, 30*time.Microsecond, 0))
	in := r.Resample([]float64{0.5}, 50, 8, 1).RatioInterval(overhead.GatewayPylon, overhead.ProxyPylon, overhead.Pylon, 0, 0.95)
	if !math.IsInf(in.Hi, 1) {
		t.Errorf("interval %v, want an unbounded upper end", in)
	}
}

// Paths with different numbers of rounds are not one run: no interval is claimed.
func TestResampleOfUnevenPathsClaimsNothing(t *testing.T) {
	t.Parallel()
	r := synthetic(200, 6, hops(50*time.Microsecond, 60*time.Microsecond, 50*time.Microsecond))
	r.Rounds[overhead.GatewayPylon] = r.Rounds[overhead.GatewayPylon][:100]
	in := r.Resample([]float64{0.5}, 20, 8, 1).RatioInterval(overhead.GatewayPylon, overhead.ProxyPylon, overhead.Pylon, 0, 0.95)
	if !math.IsInf(in.Hi, 1) {
		t.Errorf("interval %v, want an unbounded one", in)
	}
}

// The draws are shared among one worker per CPU; each draw has its own seeded generator,
// so the intervals do not depend on how many CPUs drew them.
func TestResampleIsTheSameOnAnyNumberOfCPUs(t *testing.T) {
	r := synthetic(3000, 11, hops(50*time.Microsecond, 60*time.Microsecond, 50*time.Microsecond))
	qs := []float64{0.5, 0.99}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	one := r.Resample(qs, 101, 16, 3)
	for _, cpus := range []int{2, 3, 8} {
		runtime.GOMAXPROCS(cpus)
		if got := r.Resample(qs, 101, 16, 3); !reflect.DeepEqual(got, one) {
			t.Errorf("%d CPUs drew other quantiles than one CPU", cpus)
		}
	}
	if other := r.Resample(qs, 101, 16, 4); reflect.DeepEqual(other, one) {
		t.Error("another seed drew the same quantiles: the draws ignore the seed")
	}
}

// BenchmarkResample is the report's 1 000 draws of a 100 000-request run.
func BenchmarkResample(b *testing.B) {
	r := synthetic(100_000, 5, hops(50*time.Microsecond, 60*time.Microsecond, 50*time.Microsecond))
	for b.Loop() {
		r.Resample([]float64{0.5, 0.99}, 1000, 64, 1)
	}
}

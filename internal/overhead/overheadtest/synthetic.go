// Package overheadtest makes synthetic overhead results for the tests of the code that
// summarises and prints them.
package overheadtest

import (
	"math/rand/v2"
	"time"

	"github.com/switchyard/switchyard/internal/overhead"
)

// Synthetic returns n rounds drawn from rng: every path's latency is one baseline draw per
// round (100 µs plus exponential noise of mean 20 µs, a long tail as on a real machine)
// plus, where added[p] > 0, the path's own added latency (mean added[p], half of it
// exponential noise).
func Synthetic(rng *rand.Rand, n int, added [overhead.NumPaths]time.Duration) *overhead.Result {
	noise := func(mean time.Duration) time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
	var rounds [overhead.NumPaths][]time.Duration
	for range n {
		base := 100*time.Microsecond + noise(20*time.Microsecond)
		for p := range rounds {
			d := base
			if added[p] > 0 {
				d += added[p]/2 + noise(added[p]/2)
			}
			rounds[p] = append(rounds[p], d)
		}
	}
	return overhead.NewResult(rounds)
}

// Package pace decides when the bench driver sends its next request. It is pure, in the
// style of vegeta's pacer: Pace(elapsed, hits) returns how long to wait before hit
// number hits (0-based) given the time elapsed since the start, or stop when no hit is
// left. The caller owns the clock.
package pace

import (
	"math"
	"time"
)

// Pacer paces hits.
type Pacer interface {
	// Pace returns the wait before the next hit, given the time elapsed since the start
	// and the hits already sent; stop is true when the schedule is exhausted.
	Pace(elapsed time.Duration, hits uint64) (wait time.Duration, stop bool)
}

// Schedule sends hit i at Offsets[i] × Scale after the start (late hits go at once).
type Schedule struct {
	// Offsets are the arrival offsets, non-decreasing.
	Offsets []time.Duration
	// Scale multiplies every offset (zero means 1). A time scale of 0.1 replays the
	// schedule ten times faster, matching engines started with --time-scale 0.1.
	Scale float64
}

// Due returns when hit i is due, after scaling.
func (s Schedule) Due(i int) time.Duration {
	return scale(s.Offsets[i], s.Scale)
}

// Pace implements Pacer.
func (s Schedule) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= uint64(len(s.Offsets)) {
		return 0, true
	}
	due := s.Due(int(hits)) //nolint:gosec // hits < len(Offsets), an int
	if due <= elapsed {
		return 0, false
	}
	return due - elapsed, false
}

func scale(d time.Duration, f float64) time.Duration {
	if f == 0 || f == 1 {
		return d
	}
	return time.Duration(math.Round(float64(d) * f))
}

package pace

import (
	"math"
	"time"
)

// Duration is when the last hit is due (0 for an empty schedule).
func (s Schedule) Duration() time.Duration {
	if len(s.Offsets) == 0 {
		return 0
	}
	return s.Due(len(s.Offsets) - 1)
}

// Constant sends Count hits at Rate per second, the first at once.
type Constant struct {
	Rate  float64
	Count uint64
}

// Pace implements Pacer.
func (c Constant) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= c.Count || c.Rate <= 0 {
		return 0, true
	}
	due := time.Duration(math.Round(float64(hits) * float64(time.Second) / c.Rate))
	if due <= elapsed {
		return 0, false
	}
	return due - elapsed, false
}

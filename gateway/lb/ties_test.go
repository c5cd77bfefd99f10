package lb_test

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Idle backends whose estimates differ by less than the tie band are near-ties: power-of-n and
// wait-and-widen spread them at random instead of sending every request to the nearest
// (with tie_tolerance_ms 0, the reference's exact ties, the nearest takes all). A backend
// clearly faster than the band still wins every time.
func TestNearTiesAreSpread(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		near, far *lb.Snapshot
		tolerance time.Duration
		entry     func(tol time.Duration) lbconfig.Entry
	}{
		{"power-of-n", snap(idle("a", 0.2), idle("b", 12)), snap(idle("a", 0.2), idle("b", 45)), lbconfig.DefaultTieTolerance, func(tol time.Duration) lbconfig.Entry {
			e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
			e.TieTolerance = tol
			return e
		}},
		{"wait-and-widen", snap(idle("a", 0.2), idle("b", 12)), snap(idle("a", 0.2), idle("b", 45)), lbconfig.DefaultWAWTieTolerance, func(tol time.Duration) lbconfig.Entry {
			return waw(func(e *lbconfig.Entry) { e.TieTolerance = tol })
		}},
	} {
		share := func(tol time.Duration, s *lb.Snapshot) float64 {
			b := newBalancer(t, c.entry(tol), seeded())
			n := 0
			for range 1000 {
				if d := b.Decide(s, &lb.Request{InputTokens: 100}, 0); d.Kind == lb.KindSelected && d.Index == 1 {
					n++
				}
			}
			return float64(n) / 1000
		}
		if got := share(c.tolerance, c.near); got < 0.35 || got > 0.65 {
			t.Errorf("%s, default tolerance: the farther of two near-tied backends got %.0f %%, want about half", c.name, got*100)
		}
		if got := share(0, c.near); got != 0 {
			t.Errorf("%s, exact ties only: the farther backend got %.0f %%, want 0", c.name, got*100)
		}
		if got := share(c.tolerance, c.far); got != 0 {
			t.Errorf("%s: a backend clearly slower than the tie band got %.0f %%, want 0", c.name, got*100)
		}
	}
}

// Among wait-and-widen's near-ties the least busy engine wins (running requests per slot),
// so equivalent clusters split a stream of requests evenly rather than as unevenly as coin
// flips: with a keeping one more request running than b, b takes every near-tie; with
// both equally busy, either may.
func TestNearTiesGoToTheLeastBusy(t *testing.T) {
	t.Parallel()
	busy := func(c lb.Candidate, running uint64) lb.Candidate {
		c.Load.RunningRequests = running
		return c
	}
	pon := lbconfig.DefaultEntry(lbconfig.PowerOfN)
	for _, c := range []struct {
		name    string
		entry   lbconfig.Entry
		nearRTT float64 // b's RTT: within the tie band of a's 0.2 ms
		farRTT  float64 // b's RTT: clearly beyond it
	}{
		{"wait-and-widen", waw(func(e *lbconfig.Entry) { e.TieTolerance = lbconfig.DefaultWAWTieTolerance }), 12, 45},
		{"power-of-n", pon, 12, 45},
	} {
		b := newBalancer(t, c.entry, seeded())
		uneven := snap(busy(idle("a", 0.2), 3), busy(idle("b", c.nearRTT), 2))
		for i := range 200 {
			if d := b.Decide(uneven, &lb.Request{InputTokens: 100}, 0); d.Kind != lb.KindSelected || d.Index != 1 {
				t.Fatalf("%s, decision %d: %v, want the less busy b", c.name, i, d)
			}
		}
		even := snap(busy(idle("a", 0.2), 2), busy(idle("b", c.nearRTT), 2))
		n := 0
		for range 1000 {
			if d := b.Decide(even, &lb.Request{InputTokens: 100}, 0); d.Kind == lb.KindSelected && d.Index == 1 {
				n++
			}
		}
		if n < 350 || n > 650 {
			t.Errorf("%s, equally busy near-ties: b got %d of 1000, want about half", c.name, n)
		}
		// A cluster clearly faster than the tie band still wins however busy it is.
		far := snap(busy(idle("a", 0.2), 9), busy(idle("b", c.farRTT), 0))
		if d := b.Decide(far, &lb.Request{InputTokens: 100}, 0); d.Kind != lb.KindSelected || d.Index != 0 {
			t.Errorf("%s, clearly faster but busier a: %v, want a", c.name, d)
		}
	}
}

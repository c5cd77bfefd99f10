package dispatch

import (
	"slices"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
)

// capEjections decides which ejected backends stay out of the candidates (backendState.out):
// all of them, unless that would take more than MaxEjectionPercent of the target's
// routable backends out (at least one may always be out); then those ejected first stay
// out and the others remain candidates. Run on every whole rebuild (an ejection or a
// readmission makes the snapshot dirty).
func (s *Scheduler) capEjections() {
	ejected, routable := s.ejScratch[:0], 0
	for _, id := range s.order {
		b := s.backends[id]
		b.out = false
		if !b.view.Routable() {
			continue
		}
		routable++
		if b.view.Ejected {
			ejected = append(ejected, b)
		}
	}
	allowed := lb.EjectionAllowance(len(ejected), routable, s.deps.MaxEjectionPercent)
	if allowed < len(ejected) {
		// s.order is sorted by (cluster, id): a stable sort by ejection time keeps ties in
		// that order.
		slices.SortStableFunc(ejected, func(a, b *backendState) int { return a.view.EjectedAt.Compare(b.view.EjectedAt) })
	}
	for i, b := range ejected {
		b.out = i < allowed
		ejected[i] = nil
	}
	s.ejScratch = ejected[:0]
}

// medianTPS is the median valid input throughput of the target's active backends (0 =
// none).
func (s *Scheduler) medianTPS() float64 {
	vals := s.tpsScratch[:0]
	for _, b := range s.backends {
		if b.view.Active {
			vals = append(vals, b.view.Load.InputTPS) // MedianTPS skips the invalid ones
		}
	}
	s.tpsScratch = vals
	return load.MedianTPS(vals)
}

// inputTPS is the input throughput routing uses for b: its own when valid; for a backend
// that has not measured one (new, or restarted with its statistics reset) the median of
// the target's backends, else the last value it reported; 0 (unknown) when there is none.
// Treating such a backend as unable to prefill would keep every request away from it, and
// with no request it would never measure a throughput.
func (s *Scheduler) inputTPS(b *backendState) float64 {
	if tps := b.view.Load.InputTPS; load.ValidTPS(tps) {
		return tps
	}
	if s.tpsMedian > 0 {
		return s.tpsMedian
	}
	return b.lastTPS
}

package dispatch

import (
	"slices"
)

// The scheduler's published state (/debug/state).

// State is the scheduler's published state for /debug/state.
type State struct {
	Target       Target         `json:"-"`
	Backends     int            `json:"backends"`
	Candidates   int            `json:"candidates"`
	Parked       int            `json:"parked"`
	Reservations map[string]int `json:"reservations"`
	// Ejected lists the backends ejection keeps out of the candidates; EjectedOverCap
	// those ejected but kept as candidates by the cap.
	Ejected        []string `json:"ejected,omitempty"`
	EjectedOverCap []string `json:"ejected_over_cap,omitempty"`
	// TTFTCorrections are the clusters' learned TTFT corrections (factor and the
	// observations behind it), for the clusters that have observations.
	TTFTCorrections map[string]CorrectionState `json:"ttft_corrections,omitempty"`
	// Balancers is the number of balancer instances the target holds: one per distinct
	// algorithm definition its requests used since the target's state was last reset.
	Balancers int `json:"balancers"`
}

// CorrectionState is one cluster's TTFT correction in State.
type CorrectionState struct {
	Factor       float64 `json:"factor"`
	Observations int     `json:"observations"`
	// CachedFactor and CachedObservations are the correction of discounted estimates
	// (a prefix expected cached).
	CachedFactor       float64 `json:"cached_factor"`
	CachedObservations int     `json:"cached_observations"`
}

// stateRequest asks the scheduler for its State (debug only).
type stateRequest struct{}

func (s *Scheduler) stateNow() *State {
	st := &State{Target: s.target, Backends: len(s.backends), Parked: s.parkedCount, Reservations: map[string]int{}, Balancers: len(s.balancers)}
	st.Candidates = len(s.snap(s.deps.Now()).Candidates)
	for id, b := range s.backends {
		if len(b.reservations) > 0 {
			st.Reservations[id] = len(b.reservations)
		}
		switch {
		case b.out:
			st.Ejected = append(st.Ejected, id)
		case b.view.Ejected && b.view.Routable():
			st.EjectedOverCap = append(st.EjectedOverCap, id)
		default:
		}
	}
	slices.Sort(st.Ejected)
	slices.Sort(st.EjectedOverCap)
	for c, info := range s.clusters {
		if info.ttft == nil {
			continue
		}
		if cs := info.ttft.state(); cs.Observations > 0 || cs.CachedObservations > 0 {
			if st.TTFTCorrections == nil {
				st.TTFTCorrections = map[string]CorrectionState{}
			}
			st.TTFTCorrections[c] = cs
		}
	}
	return st
}

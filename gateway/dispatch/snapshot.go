package dispatch

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/gateway/lb"
)

// The scheduler's candidate snapshot: built from the backends' views, patched in place
// when a report or a release changes a cluster, rebuilt in full at least every
// fullRebuildEvery, and carrying the clusters' TTFT corrections.

// snap returns the current candidate snapshot, rebuilding it when dirty: routable backends
// aggregated per cluster (latest-wins from the most recently updated backend), with each
// cluster's live reservations applied. Backends are visited in (cluster, id) order, kept
// sorted while the backend set is unchanged.
func (s *Scheduler) snap(now time.Time) *lb.Snapshot {
	if !s.dirty && s.snapshot != nil && now.Sub(s.builtAt) < fullRebuildEvery {
		s.refreshStale()
		return s.snapshot
	}
	s.builtAt = now
	s.stale = s.stale[:0]
	if len(s.order) != len(s.backends) {
		s.order = s.order[:0]
		for id := range s.backends {
			s.order = append(s.order, id)
		}
	}
	slices.SortFunc(s.order, func(a, b string) int {
		if c := strings.Compare(s.backends[a].view.ClusterID, s.backends[b].view.ClusterID); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	s.capEjections()
	s.tpsMedian = s.medianTPS()
	candidates, cells := s.cands[:0], s.cells[:0]
	for _, info := range s.clusters {
		info.seen = false
	}
	var (
		cluster string
		info    *clusterInfo
	)
	flush := func() {
		if info == nil {
			return
		}
		if cand, ok := s.clusterCandidate(cluster, info.backends); ok {
			candidates = append(candidates, cand)
			info.seen, info.stale, info.idx = true, false, len(candidates)-1
			cells = append(cells, info.correction())
		}
	}
	for _, id := range s.order {
		b := s.backends[id]
		if len(b.reservations) > 0 && now.Sub(b.reservations[0].at) > ReservationTTL {
			b.reservations = slices.DeleteFunc(b.reservations, func(r reservation) bool { return now.Sub(r.at) > ReservationTTL })
		}
		if !b.view.Routable() || b.out {
			continue
		}
		if info == nil || b.view.ClusterID != cluster {
			flush()
			cluster = b.view.ClusterID
			if info = s.clusters[cluster]; info == nil {
				info = &clusterInfo{}
				s.clusters[cluster] = info
			}
			info.backends = info.backends[:0]
		}
		info.backends = append(info.backends, id)
	}
	flush()
	clear(candidates[len(candidates):cap(candidates)]) // drop stale load slices
	clear(cells[len(cells):cap(cells)])
	s.cands, s.cells, s.corrected = candidates, cells, false
	for c, info := range s.clusters {
		if !info.seen {
			delete(s.clusters, c)
		}
	}
	s.snapBuf.Reset(s.target.RoutingKey, s.target.Model, candidates)
	s.snapshot = &s.snapBuf
	s.dirty = false
	return s.snapshot
}

// correction returns the cluster's TTFT correction, new for a cluster seen for the first
// time and reset when its backends are not the ones it learned about (info.backends just
// rebuilt, sorted).
func (info *clusterInfo) correction() *ttftCell {
	var (
		h   xxh3.Hasher
		sep [1]byte
	)
	h.Reset()
	for _, id := range info.backends {
		_, _ = h.WriteString(id)
		_, _ = h.Write(sep[:])
	}
	members := h.Sum64()
	switch {
	case info.ttft == nil:
		info.ttft = newTTFTCell()
	case members != info.members:
		info.ttft.reset()
	default:
	}
	info.members = members
	return info.ttft
}

// correct makes the snapshot's candidates carry their clusters' current TTFT corrections
// (on) or none (off), before a decision. With correction on, every decision reads the
// latest factors (one atomic load per candidate); off costs nothing once cleared.
//
// A cluster whose correction is not warm yet takes the geometric mean of its warm peers'
// factors: estimates are usually off for reasons the clusters share (the engines' real
// speed against their reports, the network), and an unknown cluster left at 1 next to
// peers corrected to 0.5 would look twice as slow as they and get no traffic, hence no
// observations of its own — one cluster would take everything.
func (s *Scheduler) correct(snap *lb.Snapshot, on bool) {
	if !on && !s.corrected {
		return
	}
	cold, coldCached := false, false
	for i := range snap.Candidates {
		f, fc := 0.0, 0.0
		if on {
			f, fc = s.cells[i].learned(), s.cells[i].learnedCached()
			cold, coldCached = cold || f == 0, coldCached || fc == 0
		}
		snap.Candidates[i].Correction, snap.Candidates[i].CachedCorrection = f, fc
	}
	if cold {
		poolCold(snap, full)
	}
	if coldCached {
		poolCold(snap, cachedClass)
	}
	s.corrected = on
}

// full and cachedClass select a candidate's correction of full-prefill estimates and of
// discounted ones.
func full(c *lb.Candidate) *float64        { return &c.Correction }
func cachedClass(c *lb.Candidate) *float64 { return &c.CachedCorrection }

// poolCold gives the candidates whose correction of one class has no factor (0) the geometric
// mean of the warm ones' factors; the logarithms are taken only while some cluster is cold.
func poolCold(snap *lb.Snapshot, class func(*lb.Candidate) *float64) {
	logSum, n := 0.0, 0
	for i := range snap.Candidates {
		if f := *class(&snap.Candidates[i]); f > 0 {
			logSum += math.Log(f)
			n++
		}
	}
	if n == 0 {
		return
	}
	pooled := math.Exp(logSum / float64(n))
	for i := range snap.Candidates {
		if f := class(&snap.Candidates[i]); *f == 0 {
			*f = pooled
		}
	}
}

// fullRebuildEvery bounds how long the snapshot is only patched in place: a whole rebuild
// also drops reservations older than ReservationTTL.
const fullRebuildEvery = time.Second

// refreshNow re-aggregates the clusters a report or a release changed right away, so the
// next decision finds its snapshot current (a report arrives after its answer has been
// written: this work is off every request's path; a decision only refreshes the cluster
// its own previous grant touched when no report came in between). A snapshot due for a
// whole rebuild is left to the next decision.
func (s *Scheduler) refreshNow() {
	if !s.dirty && s.snapshot != nil {
		s.refreshStale()
	}
}

// refreshStale re-aggregates the stale clusters' candidates in place; the candidate set,
// its order and the snapshot's membership are unchanged.
func (s *Scheduler) refreshStale() {
	for _, c := range s.stale {
		info := s.clusters[c]
		info.stale = false
		s.snapBuf.Candidates[info.idx], _ = s.clusterCandidate(c, info.backends)
	}
	s.stale = s.stale[:0]
}

// clusterCandidate aggregates the routable backends ids of cluster (lb.Aggregate:
// backend-local load summed, cluster-scoped fields from the most recently updated one) and
// applies their live reservations.
func (s *Scheduler) clusterCandidate(cluster string, ids []string) (lb.Candidate, bool) {
	group, resv := s.group[:0], s.resv[:0]
	source, latest := 0, time.Time{}
	for i, id := range ids {
		b := s.backends[id]
		l := b.view.Load
		l.InputTPS = s.inputTPS(b)
		l.MaxInputTPS = max(b.peakTPS, l.InputTPS)
		group = append(group, lb.Backend{ID: id, RTT: b.view.RTT, Load: l, Active: true})
		resv = append(resv, b.reservations...)
		if at := b.view.UpdatedAt; i == 0 || at.After(latest) {
			source, latest = i, at
		}
	}
	cand, ok := lb.Aggregate(cluster, group, source)
	for _, r := range resv {
		cand.Load = cand.Load.Reserve(r.tokens, r.priority)
	}
	s.group, s.resv = group, resv[:0]
	return cand, ok
}

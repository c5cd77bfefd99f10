package dispatch

import (
	"math"
	"slices"
	"strings"
	"sync/atomic"
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
			cells = append(cells, info.correction(&s.factorEpoch))
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
func (info *clusterInfo) correction(epoch *atomic.Uint64) *ttftCell {
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
		info.ttft = newTTFTCell(epoch)
	case members != info.members:
		info.ttft.reset()
	default:
	}
	info.members = members
	return info.ttft
}

// correct makes the snapshot's candidates carry their clusters' current TTFT corrections
// (on) or none (off), before a decision. With correction on, a decision after a factor
// changed reads the latest factors (one atomic load per candidate); one after no change,
// and off once cleared, cost nothing. Only the candidates whose factors changed are
// written, and recorded as changed (the balancers' indexes of the candidates follow them).
//
// A cluster whose correction is not warm yet takes the geometric mean of its warm peers'
// factors: estimates are usually off for reasons the clusters share (the engines' real
// speed against their reports, the network), and an unknown cluster left at 1 next to
// peers corrected to 0.5 would look twice as slow as they and get no traffic, hence no
// observations of its own — one cluster would take everything.
func (s *Scheduler) correct(snap *lb.Snapshot, on bool) {
	epoch := s.factorEpoch.Load() // before the factors: a change after it is seen next time
	if on == s.corrected && (!on || epoch == s.correctedAt) {
		return // as corrected last time, and no factor changed since
	}
	n := len(snap.Candidates)
	f := slices.Grow(s.factors[:0], 2*n)[:2*n]
	full, cached := f[:n], f[n:]
	for i := range snap.Candidates {
		full[i], cached[i] = 0, 0
		if on {
			full[i], cached[i] = s.cells[i].learned(), s.cells[i].learnedCached()
		}
	}
	poolCold(full)
	poolCold(cached)
	for i := range snap.Candidates {
		if c := &snap.Candidates[i]; c.Correction != full[i] || c.CachedCorrection != cached[i] {
			c.Correction, c.CachedCorrection = full[i], cached[i]
			snap.Changed(i)
		}
	}
	s.factors, s.corrected, s.correctedAt = f, on, epoch
}

// poolCold gives the clusters whose factor is 0 (none learned) the geometric mean of the
// others' factors; the logarithms are taken only while some cluster is cold.
func poolCold(factors []float64) {
	if !slices.Contains(factors, 0) {
		return
	}
	logSum, n := 0.0, 0
	for _, f := range factors {
		if f > 0 {
			logSum += math.Log(f)
			n++
		}
	}
	if n == 0 {
		return
	}
	pooled := math.Exp(logSum / float64(n))
	for i, f := range factors {
		if f == 0 {
			factors[i] = pooled
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
		corr := &s.snapBuf.Candidates[info.idx]
		full, cached := corr.Correction, corr.CachedCorrection
		s.snapBuf.Candidates[info.idx], _ = s.clusterCandidate(c, info.backends)
		// The corrections stay until the next decision's correct: a report changes a
		// cluster's load, not what was learned of its estimates.
		corr.Correction, corr.CachedCorrection = full, cached
		s.snapBuf.Changed(info.idx)
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

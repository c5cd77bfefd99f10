package gateway

import (
	"context"
	"time"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/gateway/fleet"
)

// The gateway's per-backend series (inference_server_id) and per-cluster series
// (cluster_id) are created when a backend or cluster first serves a request. Backends
// come and go — in Kubernetes a pylon's id is its pod's name, new on every rollout — so
// series that stayed would grow /metrics and the gateway's memory with every pod that
// ever existed. The sweep drops the series of a backend that has been out of the fleet
// (expired or deregistered) for the retention, and those of a cluster once none of its
// backends has been in the fleet for as long; the wait lets scrapes see their last
// values. A backend that comes back within the retention keeps its series; one that comes
// back after it starts them again from zero (a counter reset to Prometheus).

// DefaultSeriesRetention is how long a departed backend's series are kept.
const DefaultSeriesRetention = 10 * time.Minute

// seriesSweeper holds when each departed backend and cluster was first seen gone. Only
// its loop uses it.
type seriesSweeper struct {
	m         *gatewayMetrics
	retention time.Duration
	backends  map[string]time.Time // backend id → first sweep that found it gone
	clusters  map[string]time.Time // cluster id → first sweep that found it gone
}

func newSeriesSweeper(m *gatewayMetrics, retention time.Duration) *seriesSweeper {
	return &seriesSweeper{m: m, retention: retention, backends: map[string]time.Time{}, clusters: map[string]time.Time{}}
}

// sweep drops the series of the backends and clusters not in members for the retention
// (now against the first sweep that found them gone) and returns how many of each it
// dropped.
func (s *seriesSweeper) sweep(now time.Time, members fleet.Members) (backends, clusters int) {
	ids, cls := s.m.seriesOwners()
	backends = expire(s.backends, ids, members.IDs, now, s.retention, s.m.dropBackend)
	clusters = expire(s.clusters, cls, members.Clusters, now, s.retention, s.m.dropCluster)
	return backends, clusters
}

// expire runs drop for each owner of series not live since gone[owner] by retention or
// more, records when the others were first found gone, and forgets those that are live
// again or have no series left. It returns the number dropped.
func expire(gone map[string]time.Time, owners, live map[string]struct{}, now time.Time, retention time.Duration, drop func(string)) int {
	n := 0
	for id := range gone {
		if _, ok := owners[id]; !ok {
			delete(gone, id)
		}
	}
	for id := range owners {
		if _, ok := live[id]; ok {
			delete(gone, id)
			continue
		}
		since, ok := gone[id]
		switch {
		case !ok:
			gone[id] = now
		case now.Sub(since) >= retention:
			drop(id)
			delete(gone, id)
			n++
		}
	}
	return n
}

// seriesOwners returns the backends and clusters that have series now.
func (m *gatewayMetrics) seriesOwners() (backends, clusters map[string]struct{}) {
	backends, clusters = map[string]struct{}{}, map[string]struct{}{}
	m.targets.Range(func(_, v any) bool {
		ts, _ := v.(*targetSeries)
		ts.backends.Range(func(k, _ any) bool {
			backends[k.(string)] = struct{}{} //nolint:forcetypeassert // the map's key type
			return true
		})
		ts.ttfts.Range(func(k, _ any) bool {
			clusters[k.(string)] = struct{}{} //nolint:forcetypeassert // the map's key type
			return true
		})
		return true
	})
	return backends, clusters
}

// dropBackend unregisters the series of backend id in every target, then marks them
// dropped (see droppable) and forgets them. A request still holding them counts into
// series no longer shown.
func (m *gatewayMetrics) dropBackend(id string) {
	m.targets.Range(func(_, v any) bool {
		ts, _ := v.(*targetSeries)
		b, ok := ts.backends.Load(id)
		if !ok {
			return true
		}
		bs, _ := b.(*backendSeries)
		bs.mu.Lock() // no other counter is made meanwhile
		for _, name := range bs.names {
			m.set.UnregisterMetric(name)
		}
		bs.others.Range(func(_, o any) bool {
			m.set.UnregisterMetric(o.(*otherCounter).series) //nolint:forcetypeassert // the map's value type
			return true
		})
		bs.dropped.Store(true)
		bs.mu.Unlock()
		ts.backends.CompareAndDelete(id, bs)
		ts.lastBackend.CompareAndSwap(bs, nil)
		return true
	})
}

// dropCluster unregisters the TTFT-estimate series of cluster in every target, then
// marks them dropped and forgets them.
func (m *gatewayMetrics) dropCluster(cluster string) {
	m.targets.Range(func(_, v any) bool {
		ts, _ := v.(*targetSeries)
		t, ok := ts.ttfts.Load(cluster)
		if !ok {
			return true
		}
		s, _ := t.(*ttftSeries)
		for _, name := range s.names {
			m.set.UnregisterMetric(name)
		}
		s.dropped.Store(true)
		ts.ttfts.CompareAndDelete(cluster, s)
		ts.lastTTFT.CompareAndSwap(s, nil)
		ts.backends.Range(func(_, b any) bool {
			b.(*backendSeries).ttft.CompareAndSwap(s, nil) //nolint:forcetypeassert // the map's value type
			return true
		})
		return true
	})
}

// sweepEvery is how often the sweep runs: a tenth of the retention, at least a second
// and at most a minute.
func sweepEvery(retention time.Duration) time.Duration {
	return min(max(retention/10, time.Second), time.Minute)
}

// sweepSeries runs the sweep until ctx is done.
func (g *Gateway) sweepSeries(ctx context.Context) {
	s := newSeriesSweeper(g.metrics, g.cfg.SeriesRetention)
	actors.Every(ctx, sweepEvery(g.cfg.SeriesRetention), func() {
		if b, c := s.sweep(g.deps.Now(), g.fleet.Members()); b+c > 0 {
			g.log.Info("series_dropped", "backends", b, "clusters", c, "retention", g.cfg.SeriesRetention.String())
		}
	})
}

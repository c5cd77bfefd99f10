package gateway

import (
	"context"
	"strings"
	"time"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
)

// The gateway's per-backend series (inference_server_id), per-cluster series (cluster_id)
// and per-target series (routing_key and model) are created when a backend, cluster or
// routing target first serves a request. Backends come and go — in Kubernetes a pylon's
// id is its pod's name, new on every rollout — and so do models (an engine's adapters), so
// series that stayed would grow /metrics and the gateway's memory with every pod and
// model that ever existed. The sweep drops the series of a backend that has been out of
// the fleet (expired or deregistered) for the retention, those of a cluster once none of
// its backends has been in the fleet for as long, and those of a routing target once it
// has had no scheduler (no backend serving it) for as long; the wait lets scrapes see
// their last values. One that comes back within the retention keeps its series; one that
// comes back after it starts them again from zero (a counter reset to Prometheus).

// DefaultSeriesRetention is how long a departed backend's series are kept.
const DefaultSeriesRetention = 10 * time.Minute

// seriesSweeper holds when each departed backend, cluster and target was first seen
// gone. Only its loop uses it.
type seriesSweeper struct {
	m         *gatewayMetrics
	retention time.Duration
	backends  map[string]time.Time          // backend id → first sweep that found it gone
	clusters  map[string]time.Time          // cluster id → first sweep that found it gone
	targets   map[dispatch.Target]time.Time // routing target → first sweep that found it gone
}

func newSeriesSweeper(m *gatewayMetrics, retention time.Duration) *seriesSweeper {
	return &seriesSweeper{
		m: m, retention: retention,
		backends: map[string]time.Time{}, clusters: map[string]time.Time{}, targets: map[dispatch.Target]time.Time{},
	}
}

// swept counts what one sweep dropped.
type swept struct{ backends, clusters, targets int }

// sweep drops the series of the backends and clusters not in members, and of the targets
// liveTarget denies, for the retention (now against the first sweep that found them
// gone), and returns how many of each it dropped.
func (s *seriesSweeper) sweep(now time.Time, members fleet.Members, liveTarget func(dispatch.Target) bool) swept {
	ids, cls := s.m.seriesOwners()
	in := func(set map[string]struct{}) func(string) bool {
		return func(k string) bool { _, ok := set[k]; return ok }
	}
	var n swept
	n.backends = expire(s.backends, ids, in(members.IDs), now, s.retention, s.m.dropBackend)
	n.clusters = expire(s.clusters, cls, in(members.Clusters), now, s.retention, s.m.dropCluster)
	n.targets = expire(s.targets, s.m.targetOwners(), liveTarget, now, s.retention, s.m.dropTarget)
	return n
}

// expire runs drop for each owner of series not live since gone[owner] by retention or
// more, records when the others were first found gone, and forgets those that are live
// again or have no series left. It returns the number dropped.
func expire[K comparable](gone map[K]time.Time, owners map[K]struct{}, live func(K) bool, now time.Time, retention time.Duration, drop func(K)) int {
	n := 0
	for id := range gone {
		if _, ok := owners[id]; !ok {
			delete(gone, id)
		}
	}
	for id := range owners {
		if live(id) {
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

// sweepSeries runs the sweep until ctx is done. The empty target (requests for a model
// no backend serves) is always live.
func (g *Gateway) sweepSeries(ctx context.Context) {
	s := newSeriesSweeper(g.metrics, g.cfg.SeriesRetention)
	live := func(t dispatch.Target) bool { return t == (dispatch.Target{}) || g.dir.Lookup(t) != nil }
	actors.Every(ctx, sweepEvery(g.cfg.SeriesRetention), func() {
		if n := s.sweep(g.deps.Now(), g.fleet.Members(), live); n != (swept{}) {
			g.log.Info("series_dropped", "backends", n.backends, "clusters", n.clusters, "targets", n.targets, "retention", g.cfg.SeriesRetention.String())
		}
	})
}

// targetOwners returns the routing targets that have series now, read from the series'
// names, so that series a late request made after its target's were dropped are found
// too.
func (m *gatewayMetrics) targetOwners() map[dispatch.Target]struct{} {
	out := map[dispatch.Target]struct{}{}
	for _, name := range m.set.ListMetricNames() {
		if t, ok := targetOf(name); ok {
			out[t] = struct{}{}
		}
	}
	return out
}

// targetOf reads the routing target of a series name whose labels start with
// routing_key and model (every per-target series' do).
func targetOf(name string) (dispatch.Target, bool) {
	const rk, model = `{routing_key="`, `,model="`
	i := strings.Index(name, rk)
	if i < 0 {
		return dispatch.Target{}, false
	}
	key, rest, ok := unquote(name[i+len(rk):])
	if !ok || !strings.HasPrefix(rest, model) {
		return dispatch.Target{}, false
	}
	m, _, ok := unquote(rest[len(model):])
	return dispatch.Target{RoutingKey: key, Model: m}, ok
}

// unquote reads a label value escaped as escape does, up to its closing quote, and
// returns it and what follows the quote.
func unquote(s string) (value, rest string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return b.String(), s[i+1:], true
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}

// dropTarget unregisters every series of target t: those labelled with its routing key
// and model (its backends' included), and the per-model ones (its TTFT-estimate series
// included) when no other target has the model. The cached lookups of them (the
// target's, its backends', the counter cache) are marked stale.
func (m *gatewayMetrics) dropTarget(t dispatch.Target) {
	var ts *targetSeries
	if v, ok := m.targets.Load(t); ok {
		ts, _ = v.(*targetSeries)
	}
	var held []*backendSeries // locked: no other counter of theirs is made meanwhile
	if ts != nil {
		ts.backends.Range(func(_, b any) bool {
			bs, _ := b.(*backendSeries)
			bs.mu.Lock()
			held = append(held, bs)
			return true
		})
	}
	marker := `{routing_key="` + escape(t.RoutingKey) + `",model="` + escape(t.Model) + `"`
	byModel := `{model="` + escape(t.Model) + `"` // the per-model series: replay, overhead, TTFT estimates
	shared := false                               // another target has the model: its per-model series stay
	m.targets.Range(func(k, v any) bool {
		o, _ := k.(dispatch.Target)
		ots, _ := v.(*targetSeries)
		shared = shared || (o != t && o.Model == t.Model && !ots.dropped.Load())
		return !shared
	})
	for _, name := range m.set.ListMetricNames() {
		if strings.Contains(name, marker) || (!shared && (strings.Contains(name, byModel+"}") || strings.Contains(name, byModel+","))) {
			m.set.UnregisterMetric(name)
		}
	}
	if ts != nil && !shared {
		ts.ttfts.Range(func(_, v any) bool {
			v.(*ttftSeries).dropped.Store(true) //nolint:forcetypeassert // the map's value type
			return true
		})
	}
	for _, bs := range held {
		bs.dropped.Store(true)
		bs.mu.Unlock()
	}
	if ts != nil {
		ts.dropped.Store(true)
		m.targets.CompareAndDelete(t, ts)
	}
	m.cacheGen.Add(1)
}

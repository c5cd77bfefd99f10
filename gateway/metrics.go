package gateway

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lb"
)

// Metric names (without the configurable prefix): the reference router's, plus ours.
const (
	mRequests         = "requests_total"
	mAttempts         = "proxy_attempts_total"
	mRetries          = "proxy_retries_total"
	mRetryExhausted   = "proxy_retry_exhausted_total"
	mUncheckedRetries = "proxy_unchecked_retries_total"
	mSelections       = "routing_selections_total"
	mKVFallback       = "routing_kv_free_token_fallback_selections_total"
	mSessions         = "routing_session_selections_total"
	mAdmission        = "admission_rejections_total"
	mRoutingRejects   = "routing_rejections_total"
	mProxyDuration    = "proxy_duration_seconds"
	mRoutingDuration  = "routing_duration_seconds"
	mOverhead         = "gateway_overhead_seconds"
	mReplayBytes      = "proxy_replay_buffer_bytes"
	mParked           = "parked_requests"
	mActiveBackends   = "active_inference_servers"
	mRegistrations    = "registrations_total"
	mLoadUpdates      = "load_updates_total"
	mLBConfigReloads  = "lb_config_reloads_total"
	mLoadReports      = "load_reports_total"
	mClientCancelled  = "client_cancelled_total"
	mBackendsExpired  = "backends_expired_total"
	// mAbandoned counts the attempts abandoned because their pylon stopped answering.
	mAbandoned        = "upstream_abandoned_attempts_total"
	mInflightRequests = "inflight_requests"
	mStreamsRelayed   = "streams_relayed"
	// mRoutingTargets is the number of routing targets (routing key × model) with a scheduler.
	mRoutingTargets = "routing_targets"
	// mAdminUnauthorized counts admin-listener requests refused for a missing or wrong token.
	mAdminUnauthorized = "admin_unauthorized_total"
	// The TTFT-estimate accuracy of streamed attempts, per model and cluster
	// (docs/routing.md): |observed − estimate| / estimate, |observed − estimate|, and the
	// attempts whose first byte came later than estimated.
	mTTFTErrorRatio   = "ttft_estimate_error_ratio"
	mTTFTErrorSeconds = "ttft_estimate_error_seconds"
	mTTFTExceeded     = "ttft_estimate_exceeded_total"
)

var (
	proxyBuckets   = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	routingBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60}
	overheadBucket = metrics.ExponentialBuckets(1e-6, 2, 20)
	replayBuckets  = []float64{0, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}
	// ttftRatioBuckets are fine around the 5–30 % errors that tell a good estimate from a
	// poor one.
	ttftRatioBuckets   = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 4, 10}
	ttftSecondsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// gatewayMetrics is one gateway instance's metric set. Series with request-derived labels
// (model, routing key) are created on first use; labels stay bounded by the registered
// fleet (models and backends), never request ids or keys.
type gatewayMetrics struct {
	set    *metrics.Set
	prefix string
	parked *metrics.Gauge
	infl   *metrics.Gauge
	// cache maps a series (name + label values) to its counter or histogram so the hot
	// path does not format series names per request.
	// An entry made before the latest sweep that dropped series (cacheGen) is looked up
	// again.
	cache    sync.Map // seriesKey → cachedCounter
	cacheGen atomic.Uint64
	// targets holds the series a routed request touches, per routing target, so the
	// per-request path does one lookup per target and one per backend instead of one per
	// series.
	targets     sync.Map // dispatch.Target → *targetSeries
	loadApplied *metrics.Counter
}

// targetSeries are one routing target's per-request series.
type targetSeries struct {
	m          *gatewayMetrics
	t          dispatch.Target
	replay     *metrics.PrometheusHistogram
	overhead   *metrics.PrometheusHistogram
	routing    *metrics.PrometheusHistogram
	selections sync.Map // selectionKey → *metrics.Counter
	backends   sync.Map // backend id → *backendSeries
	// lastBackend is the last one looked up (one backend per target is common).
	lastBackend atomic.Pointer[backendSeries]
	// ttfts holds the TTFT-estimate error series by cluster id; lastTTFT is the last one
	// looked up.
	ttfts    sync.Map // cluster id → *ttftSeries
	lastTTFT atomic.Pointer[ttftSeries]
	dropped  atomic.Bool // unregistered by the sweep (see droppable)
}

func (ts *targetSeries) isDropped() bool { return ts.dropped.Load() }

// ttftSeries are the TTFT-estimate error series of one model and cluster.
type ttftSeries struct {
	cluster  string
	ratio    *metrics.PrometheusHistogram
	seconds  *metrics.PrometheusHistogram
	exceeded *metrics.Counter
	names    [3]string   // the three above
	dropped  atomic.Bool // unregistered by the sweep (see droppable)
}

// ttft returns the TTFT-estimate error series of t's model and cluster.
func (ts *targetSeries) ttft(cluster string) *ttftSeries {
	if s := ts.lastTTFT.Load(); s != nil && s.cluster == cluster && !s.dropped.Load() {
		return s
	}
	s := loadLive(&ts.ttfts, cluster, func() *ttftSeries {
		m, model := ts.m, ts.t.Model
		s := &ttftSeries{cluster: cluster, names: [3]string{
			m.series(mTTFTErrorRatio, "model", model, "cluster_id", cluster),
			m.series(mTTFTErrorSeconds, "model", model, "cluster_id", cluster),
			m.series(mTTFTExceeded, "model", model, "cluster_id", cluster),
		}}
		s.ratio = m.set.GetOrCreatePrometheusHistogramExt(s.names[0], ttftRatioBuckets)
		s.seconds = m.set.GetOrCreatePrometheusHistogramExt(s.names[1], ttftSecondsBuckets)
		s.exceeded = m.set.GetOrCreateCounter(s.names[2])
		return s
	})
	ts.lastTTFT.Store(s)
	return s
}

// ttftOf returns the TTFT-estimate error series of cluster, cached on the series of the
// backend that served the attempt (a backend stays in its cluster): no lookup by name
// per request.
func (ts *targetSeries) ttftOf(bs *backendSeries, cluster string) *ttftSeries {
	if s := bs.ttft.Load(); s != nil && s.cluster == cluster && !s.dropped.Load() {
		return s
	}
	s := ts.ttft(cluster)
	bs.ttft.Store(s)
	return s
}

// droppable is a set of series the sweep may drop (seriessweep.go). It unregisters them
// first and then marks them dropped, so a lookup that finds them dropped makes them anew
// (registered again) rather than counting into series no longer shown.
type droppable interface{ isDropped() bool }

func (s *ttftSeries) isDropped() bool { return s.dropped.Load() }

// loadLive returns m's value under key unless it was dropped, else the one fresh makes,
// stored in its place.
func loadLive[K comparable, T droppable](m *sync.Map, key K, fresh func() T) T {
	if v, ok := m.Load(key); ok {
		if s, _ := v.(T); !s.isDropped() {
			return s
		}
	}
	s := fresh()
	for {
		v, loaded := m.LoadOrStore(key, s)
		if !loaded {
			return s
		}
		if old, _ := v.(T); !old.isDropped() {
			return old
		}
		m.CompareAndDelete(key, v) // dropped, on its way out of the map
	}
}

// observe records one attempt's TTFT estimate (> 0) against its observed time to first
// byte.
func (s *ttftSeries) observe(estimate, observed time.Duration) {
	diff := observed - estimate
	if diff > 0 {
		s.exceeded.Inc()
	}
	s.seconds.Update(diff.Abs().Seconds())
	s.ratio.Update(float64(diff.Abs()) / float64(estimate))
}

type selectionKey struct {
	algorithm string
	fallback  bool
}

// backendSeries are the series of a target's requests served by one backend; the
// success-path counters (status 200) are resolved once. Every series naming the backend is
// here, so that they can all be dropped once it has left the fleet (seriessweep.go).
type backendSeries struct {
	id            string
	proxyDuration *metrics.PrometheusHistogram
	attempts200   *metrics.Counter
	requests200   *metrics.Counter
	names         [3]string // the three above
	// ttft is the TTFT-estimate error series of the backend's cluster (see ttftOf).
	ttft atomic.Pointer[ttftSeries]
	// others holds the counters of the other attempt results and request statuses,
	// created on first use under mu; dropped says the series are unregistered (see
	// droppable), and no other counter is made for them after (a late request holding
	// them is then not counted).
	others  sync.Map // otherKey → *otherCounter
	mu      sync.Mutex
	dropped atomic.Bool
}

func (bs *backendSeries) isDropped() bool { return bs.dropped.Load() }

// otherKey names one of a backend's other counters: the metric and its last label's value.
type otherKey struct{ name, value string }

type otherCounter struct {
	series string
	c      *metrics.Counter
}

// other returns bs's counter of name whose last label (after routing key, model and
// backend) is label=value, creating it on first use.
func (ts *targetSeries) other(bs *backendSeries, name, label, value string) *metrics.Counter {
	k := otherKey{name, value}
	if o, ok := bs.others.Load(k); ok {
		return o.(*otherCounter).c
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if o, ok := bs.others.Load(k); ok {
		return o.(*otherCounter).c
	}
	if bs.dropped.Load() {
		return new(metrics.Counter) // counted nowhere: the backend's series are gone
	}
	series := ts.m.series(name, "routing_key", ts.t.RoutingKey, "model", ts.t.Model, "inference_server_id", bs.id, label, value)
	o := &otherCounter{series: series, c: ts.m.set.GetOrCreateCounter(series)}
	bs.others.Store(k, o)
	return o.c
}

// target returns t's series, creating them on first use.
func (m *gatewayMetrics) target(t dispatch.Target) *targetSeries {
	if v, ok := m.targets.Load(t); ok {
		if ts, _ := v.(*targetSeries); !ts.dropped.Load() {
			return ts
		}
	}
	return loadLive(&m.targets, t, func() *targetSeries {
		ts := &targetSeries{
			m:        m,
			t:        t,
			replay:   m.set.GetOrCreatePrometheusHistogramExt(m.series(mReplayBytes, "model", t.Model), replayBuckets),
			overhead: m.set.GetOrCreatePrometheusHistogramExt(m.series(mOverhead, "model", t.Model), overheadBucket),
			routing:  m.set.GetOrCreatePrometheusHistogramExt(m.series(mRoutingDuration, "routing_key", t.RoutingKey, "model", t.Model), routingBuckets),
		}
		m.zeroTarget(t)
		return ts
	})
}

// backend returns the series of t's requests served by backend id.
func (ts *targetSeries) backend(id string) *backendSeries {
	if bs := ts.lastBackend.Load(); bs != nil && bs.id == id && !bs.dropped.Load() {
		return bs
	}
	bs := loadLive(&ts.backends, id, func() *backendSeries {
		m, t := ts.m, ts.t
		bs := &backendSeries{id: id, names: [3]string{
			m.series(mProxyDuration, "routing_key", t.RoutingKey, "model", t.Model, "inference_server_id", id),
			m.series(mAttempts, "routing_key", t.RoutingKey, "model", t.Model, "inference_server_id", id, "result", "upstream_200"),
			m.series(mRequests, "routing_key", t.RoutingKey, "model", t.Model, "inference_server_id", id, "status", "200"),
		}}
		bs.proxyDuration = m.set.GetOrCreatePrometheusHistogramExt(bs.names[0], proxyBuckets)
		bs.attempts200 = m.set.GetOrCreateCounter(bs.names[1])
		bs.requests200 = m.set.GetOrCreateCounter(bs.names[2])
		return bs
	})
	ts.lastBackend.Store(bs)
	return bs
}

// attempt counts an upstream attempt's result (upstream_<status> or proxy_502).
func (ts *targetSeries) attempt(bs *backendSeries, status int) {
	if status == fasthttp.StatusOK {
		bs.attempts200.Inc()
		return
	}
	ts.other(bs, mAttempts, "result", "upstream_"+strconv.Itoa(status)).Inc()
}

// request counts a finished request by the backend that answered ("" for none) and status.
// A streamed answer is counted once written (stream.go): 499 when the client went away
// before its end (relay.StatusClientClosedRequest), 502 when the stream broke or carried an
// error event, its HTTP status otherwise.
func (ts *targetSeries) request(backend string, status int) {
	if backend != "" {
		if bs := ts.backend(backend); status == fasthttp.StatusOK {
			bs.requests200.Inc()
		} else {
			ts.other(bs, mRequests, "status", strconv.Itoa(status)).Inc()
		}
		return
	}
	ts.m.inc(mRequests, "routing_key", ts.t.RoutingKey, "model", ts.t.Model, "inference_server_id", backend, "status", strconv.Itoa(status))
}

// seriesKey identifies a series by name and up to five label values (keys are fixed per
// name).
type seriesKey struct {
	name       string
	v0, v1, v2 string
	v3, v4     string
}

func keyOf(name string, kv []string) (seriesKey, bool) {
	k := seriesKey{name: name}
	vals := [5]*string{&k.v0, &k.v1, &k.v2, &k.v3, &k.v4}
	if len(kv) > 2*len(vals) {
		return k, false
	}
	for i := 1; i < len(kv); i += 2 {
		*vals[i/2] = kv[i]
	}
	return k, true
}

func newMetrics(prefix string) *gatewayMetrics {
	m := &gatewayMetrics{set: metrics.NewSet(), prefix: prefix}
	m.parked = m.set.NewGauge(prefix+mParked, nil)
	m.infl = m.set.NewGauge(prefix+mInflightRequests, nil)
	m.loadApplied = m.set.NewCounter(m.series(mLoadReports, "result", "applied"))
	m.zeroGateway()
	return m
}

// escape makes a label value safe inside a Prometheus series name.
func escape(v string) string {
	if !strings.ContainsAny(v, "\"\\\n") {
		return v
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return r.Replace(v)
}

// series builds name{k1="v1",...} from alternating keys and values.
func (m *gatewayMetrics) series(name string, kv ...string) string {
	var b strings.Builder
	b.Grow(len(m.prefix) + len(name) + 16*len(kv))
	b.WriteString(m.prefix)
	b.WriteString(name)
	if len(kv) > 0 {
		b.WriteByte('{')
		for i := 0; i+1 < len(kv); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(kv[i])
			b.WriteString(`="`)
			b.WriteString(escape(kv[i+1]))
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	return b.String()
}

// cachedCounter is a counter in gatewayMetrics.cache, and the cacheGen it was found in.
type cachedCounter struct {
	c   *metrics.Counter
	gen uint64
}

func (m *gatewayMetrics) inc(name string, kv ...string) {
	k, ok := keyOf(name, kv)
	gen := m.cacheGen.Load()
	if ok {
		if v, found := m.cache.Load(k); found {
			if cc, _ := v.(cachedCounter); cc.gen == gen {
				cc.c.Inc()
				return
			}
		}
	}
	c := m.set.GetOrCreateCounter(m.series(name, kv...))
	if ok {
		m.cache.Store(k, cachedCounter{c: c, gen: gen})
	}
	c.Inc()
}

// selected counts a grant of t: its algorithm, primary or fallback, a KV-free-token
// fallback, the session state under last_cluster_affinity, and the routing time of a
// request's first grant (routing < 0: a retry's).
func (ts *targetSeries) selected(algorithm string, rank int, kvSkipped bool, routing time.Duration, session lb.SessionState) {
	selection := "primary"
	if rank > 1 {
		selection = "fallback"
	}
	m, t := ts.m, ts.t
	k := selectionKey{algorithm: algorithm, fallback: rank > 1}
	c, ok := ts.selections.Load(k)
	if !ok {
		c, _ = ts.selections.LoadOrStore(k, m.set.GetOrCreateCounter(m.series(mSelections, "routing_key", t.RoutingKey, "model", t.Model, "algorithm", algorithm, "selection", selection)))
	}
	c.(*metrics.Counter).Inc()
	if kvSkipped {
		m.inc(mKVFallback, "routing_key", t.RoutingKey, "model", t.Model, "algorithm", algorithm)
	}
	if session != lb.SessionNone {
		m.inc(mSessions, "routing_key", t.RoutingKey, "model", t.Model, "algorithm", algorithm,
			"session_state", session.String(), "selection", selection)
	}
	if routing >= 0 {
		ts.routing.Update(routing.Seconds())
	}
}

// Rejected implements dispatch.Observer.
func (m *gatewayMetrics) Rejected(t dispatch.Target, r dispatch.Reason) {
	reason := r.String()
	if rejectionOf(r).admission {
		m.inc(mAdmission, "routing_key", t.RoutingKey, "model", t.Model, "reason", reason)
	}
	m.inc(mRoutingRejects, "routing_key", t.RoutingKey, "model", t.Model, "reason", reason)
}

// Parked implements dispatch.Observer.
func (m *gatewayMetrics) Parked(_ dispatch.Target, delta int) {
	m.parked.Add(float64(delta))
}

// write writes the /metrics page: the set, then parts (series computed at scrape time),
// then the process's own go_* and process_* series.
func (m *gatewayMetrics) write(w io.Writer, parts ...func(io.Writer)) {
	m.page().Write(w, append([]func(io.Writer){m.set.WritePrometheus}, parts...)...)
}

package gateway

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
)

func (m *gatewayMetrics) text() string {
	var b bytes.Buffer
	m.set.WritePrometheus(&b)
	return b.String()
}

// alive keeps every routing target.
func alive(dispatch.Target) bool { return true }

func members(ids ...string) fleet.Members {
	m := fleet.Members{IDs: map[string]struct{}{}, Clusters: map[string]struct{}{}}
	for _, id := range ids {
		m.IDs[id], m.Clusters["c-"+id] = struct{}{}, struct{}{}
	}
	return m
}

// The sweep drops a backend's series only once it has been gone for the retention, keeps
// those of a backend back in the fleet, and drops again the series a late request made
// for a backend already dropped.
func TestSeriesSweepRetention(t *testing.T) {
	m := newMetrics("x_")
	ts := m.target(dispatch.Target{Model: "m"})
	use := func(id string) {
		bs := ts.backend(id)
		ts.attempt(bs, 200)
		ts.attempt(bs, 503)
		ts.ttftOf(bs, "c-"+id).observe(time.Second, 2*time.Second)
	}
	has := func(label string) bool { return strings.Contains(m.text(), label) }
	use("a")
	use("b")
	s := newSeriesSweeper(m, 5*time.Minute)
	t0 := time.Unix(1_000_000, 0)

	if n := s.sweep(t0, members("b"), alive); n.backends+n.clusters != 0 {
		t.Fatalf("first sweep with a gone (its clock starts) dropped %+v, want nothing yet", n)
	}
	if b := s.sweep(t0.Add(4*time.Minute), members("b"), alive).backends; b != 0 || !has(`inference_server_id="a"`) {
		t.Fatalf("within the retention: dropped %d, series of a present %v", b, has(`inference_server_id="a"`))
	}
	if n := s.sweep(t0.Add(5*time.Minute), members("b"), alive); n.backends != 1 || n.clusters != 1 {
		t.Fatalf("at the retention: dropped %+v, want 1 backend and 1 cluster", n)
	}
	if has(`inference_server_id="a"`) || has(`cluster_id="c-a"`) {
		t.Fatalf("a's series stayed:\n%s", m.text())
	}
	if !has(`inference_server_id="b",result="upstream_503"`) || !has(`cluster_id="c-b"`) {
		t.Fatalf("b, live, lost series:\n%s", m.text())
	}

	// b leaves, comes back before the retention: kept.
	s.sweep(t0.Add(6*time.Minute), members(), alive)
	s.sweep(t0.Add(7*time.Minute), members("b"), alive)
	if b := s.sweep(t0.Add(12*time.Minute), members("b"), alive).backends; b != 0 || !has(`inference_server_id="b"`) {
		t.Fatalf("b back within the retention: dropped %d", b)
	}

	// A request that finishes late for a (gone) makes its series again: swept again.
	use("a")
	s.sweep(t0.Add(13*time.Minute), members("b"), alive)
	if n := s.sweep(t0.Add(18*time.Minute), members("b"), alive); n.backends != 1 || n.clusters != 1 || has(`inference_server_id="a"`) {
		t.Fatalf("a's late series: dropped %+v; still shown %v", n, has(`inference_server_id="a"`))
	}
	if len(s.backends) != 0 || len(s.clusters) != 0 {
		t.Fatalf("the sweeper still tracks %v and %v", s.backends, s.clusters)
	}
}

// A backend's series held by a request when they are dropped stay out of /metrics: a
// counter first needed after the drop is not registered, and the backend's cached TTFT
// series of a dropped cluster is forgotten.
func TestDroppedSeriesStayDropped(t *testing.T) {
	m := newMetrics("x_")
	ts := m.target(dispatch.Target{Model: "m"})
	bs := ts.backend("a")
	ts.attempt(bs, 200)
	tt := ts.ttftOf(bs, "c")
	m.dropBackend("a")
	ts.attempt(bs, 502) // a late answer, its counter new
	if strings.Contains(m.text(), `inference_server_id="a"`) {
		t.Fatalf("a late count brought a dropped backend's series back:\n%s", m.text())
	}
	keep := ts.backend("k") // a backend of the same cluster whose series stay
	ts.ttftOf(keep, "c")
	m.dropCluster("c")
	if keep.ttft.Load() != nil || ts.lastTTFT.Load() == tt {
		t.Fatal("the dropped cluster's series are still cached")
	}
	if ts.ttftOf(keep, "c") == tt || !strings.Contains(m.text(), `cluster_id="c"`) {
		t.Fatal("the cluster's series were not made again on use")
	}

	// A lookup that raced the drop and cached the dropped series again: they are not used.
	ts.lastBackend.Store(bs)
	keep.ttft.Store(tt)
	ts.lastTTFT.Store(tt)
	if nb := ts.backend("a"); nb == bs || !strings.Contains(m.text(), `inference_server_id="a"`) {
		t.Fatal("a dropped backend's cached series were used again")
	}
	if ts.ttftOf(keep, "c") == tt || ts.ttft("c") == tt {
		t.Fatal("a dropped cluster's cached series were used again")
	}
}

// A routing target without a scheduler for the retention loses every series labelled
// with it, its backends' and its model's included; a target still served keeps its own,
// and a counter cached before the drop is looked up again.
func TestSeriesSweepDropsDepartedTargets(t *testing.T) {
	m := newMetrics("x_")
	gone, kept := dispatch.Target{Model: `lora-"a"`}, dispatch.Target{RoutingKey: "k", Model: "base"}
	for _, tg := range []dispatch.Target{gone, kept} {
		ts := m.target(tg)
		ts.ttftOf(ts.backend("p1"), "c-p1").observe(time.Second, time.Second)
		ts.attempt(ts.backend("p1"), 200)
		ts.request("p1", 503)
		ts.replay.Update(10)
		m.Rejected(tg, dispatch.ReasonNoCandidates)
	}
	live := func(tg dispatch.Target) bool { return tg == kept }
	s := newSeriesSweeper(m, time.Minute)
	t0 := time.Unix(1_000_000, 0)
	s.sweep(t0, members("p1"), live)
	if n := s.sweep(t0.Add(time.Minute), members("p1"), live); n.targets != 1 || n.backends != 0 {
		t.Fatalf("dropped %+v, want 1 target and no backend", n)
	}
	text := m.text()
	if strings.Contains(text, `model="lora-\"a\""`) {
		t.Fatalf("the departed target's series stayed:\n%s", text)
	}
	for _, want := range []string{
		`x_routing_rejections_total{routing_key="k",model="base"`, `inference_server_id="p1"`,
		`x_proxy_replay_buffer_bytes_count{model="base"}`, `x_ttft_estimate_exceeded_total{model="base",cluster_id="c-p1"}`,
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("the target still served lost %s:\n%s", want, text)
		}
	}
	m.Rejected(gone, dispatch.ReasonNoCandidates) // cached before the drop
	if !strings.Contains(m.text(), `model="lora-\"a\""`) {
		t.Fatal("a count after the drop went to a stale cached counter")
	}
	if n := len(m.targetOwners()); n != 2 {
		t.Fatalf("%d targets own series, want 2 (the new count's too, so a later sweep finds it)", n)
	}
}

func TestTargetOf(t *testing.T) {
	for name, want := range map[string]dispatch.Target{
		`x_a_total{routing_key="",model="m",reason="r"}`:        {Model: "m"},
		`x_a{routing_key="k\\1",model="q\"uo\nte"}`:             {RoutingKey: `k\1`, Model: "q\"uo\nte"},
		`x_routing_duration_seconds{routing_key="k",model="m"}`: {RoutingKey: "k", Model: "m"},
	} {
		if got, ok := targetOf(name); !ok || got != want {
			t.Errorf("targetOf(%s) = %+v %v, want %+v", name, got, ok, want)
		}
	}
	for _, name := range []string{`x_replay_bytes{model="m"}`, `x_b{routing_key="k"}`, `x_c{routing_key="k,model="m"`} {
		if _, ok := targetOf(name); ok {
			t.Errorf("targetOf(%s) found a target", name)
		}
	}
}

// BenchmarkSeriesSweep is one sweep of a gateway whose 4 096 backends all served one
// target (about 29 000 registered series, a histogram counting once), nothing gone: the steady cost of the sweep, once a
// minute. go test -run '^$' -bench SeriesSweep ./gateway/
func BenchmarkSeriesSweep(b *testing.B) {
	m := newMetrics("x_")
	ts := m.target(dispatch.Target{Model: "m"})
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = "pod-" + strconv.Itoa(i)
		bs := ts.backend(ids[i])
		ts.attempt(bs, 200)
		ts.attempt(bs, 503)
		ts.request(ids[i], 200)
		ts.ttftOf(bs, "c-"+ids[i]).observe(time.Second, 2*time.Second)
	}
	all := members(ids...)
	s := newSeriesSweeper(m, time.Minute)
	now := time.Unix(1_000_000, 0)
	for b.Loop() {
		if n := s.sweep(now, all, alive); n != (swept{}) {
			b.Fatalf("dropped %+v", n)
		}
	}
	b.ReportMetric(float64(len(m.set.ListMetricNames())), "series")
}

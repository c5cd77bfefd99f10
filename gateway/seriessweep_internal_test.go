package gateway

import (
	"bytes"
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

	if b, c := s.sweep(t0, members("b")); b+c != 0 { // a found gone: its clock starts
		t.Fatalf("first sweep with a gone dropped %d backends and %d clusters, want none yet", b, c)
	}
	if b, _ := s.sweep(t0.Add(4*time.Minute), members("b")); b != 0 || !has(`inference_server_id="a"`) {
		t.Fatalf("within the retention: dropped %d, series of a present %v", b, has(`inference_server_id="a"`))
	}
	if b, c := s.sweep(t0.Add(5*time.Minute), members("b")); b != 1 || c != 1 {
		t.Fatalf("at the retention: dropped %d backends and %d clusters, want 1 and 1", b, c)
	}
	if has(`inference_server_id="a"`) || has(`cluster_id="c-a"`) {
		t.Fatalf("a's series stayed:\n%s", m.text())
	}
	if !has(`inference_server_id="b",result="upstream_503"`) || !has(`cluster_id="c-b"`) {
		t.Fatalf("b, live, lost series:\n%s", m.text())
	}

	// b leaves, comes back before the retention: kept.
	s.sweep(t0.Add(6*time.Minute), members())
	s.sweep(t0.Add(7*time.Minute), members("b"))
	if b, _ := s.sweep(t0.Add(12*time.Minute), members("b")); b != 0 || !has(`inference_server_id="b"`) {
		t.Fatalf("b back within the retention: dropped %d", b)
	}

	// A request that finishes late for a (gone) makes its series again: swept again.
	use("a")
	s.sweep(t0.Add(13*time.Minute), members("b"))
	if b, c := s.sweep(t0.Add(18*time.Minute), members("b")); b != 1 || c != 1 || has(`inference_server_id="a"`) {
		t.Fatalf("a's late series: dropped %d backends and %d clusters; still shown %v", b, c, has(`inference_server_id="a"`))
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

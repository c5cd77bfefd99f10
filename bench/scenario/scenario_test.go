package scenario_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/scenarios"
)

const minimal = `
name: Test Scenario
model: dummy-model
seed: 7
request_count: 40
max_concurrency: 4
backends:
  count: 2
traffic_pattern:
  kind: uniform
  cache_affinity_keys: 8
  input_tokens: {distribution: uniform, min: 10, max: 20}
  output_tokens: {distribution: constant, value: 5}
  arrival: {distribution: constant, interval_ms: 10}
algorithms:
  - name: rr
    config: {default: round-robin}
`

func parse(t *testing.T, doc string) *scenario.Scenario {
	t.Helper()
	s, err := scenario.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// The reference bench's 17 scenarios, bundled unchanged in bench/scenarios, parse strictly
// and give manifests of their request_count.
func TestReferenceScenariosLoad(t *testing.T) {
	t.Parallel()
	names := slices.DeleteFunc(scenarios.Names(), func(n string) bool { return n == "demo" || n == "coding-sessions" })
	if len(names) != 17 {
		t.Errorf("found %d reference scenarios, want 17", len(names))
	}
	for _, n := range names {
		data, err := scenarios.Read(n)
		if err != nil {
			t.Fatal(err)
		}
		s, err := scenario.Parse(data)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if got := len(scenario.NewManifest(s, s.Seed).Requests); got != s.RequestCount {
			t.Errorf("%s: manifest has %d requests, want %d", n, got, s.RequestCount)
		}
	}
}

func TestBundledScenariosLoad(t *testing.T) {
	t.Parallel()
	names := scenarios.Names()
	if len(names) != 19 {
		t.Errorf("bundled %d scenarios, want 17 reference + demo + coding-sessions", len(names))
	}
	for _, n := range names {
		data, err := scenarios.Read(n)
		if err != nil {
			t.Fatal(err)
		}
		s, err := scenario.Parse(data)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if s.Name != n {
			t.Errorf("%s.yaml is named %q", n, s.Name)
		}
	}
}

func TestDemoScenario(t *testing.T) {
	t.Parallel()
	data, err := scenarios.Read("demo")
	if err != nil {
		t.Fatal(err)
	}
	s := parse(t, string(data))
	names := make([]string, 0, len(s.Algorithms))
	for _, a := range s.Algorithms {
		names = append(names, a.Name)
	}
	if diff := cmp.Diff([]string{"round-robin", "power-of-two", "wait-and-widen", "wait-and-widen-affinity", "wait-and-widen-prefix"}, names); diff != "" {
		t.Errorf("algorithms (-want +got):\n%s", diff)
	}
	if !s.Algorithms[4].Plain() || s.Algorithms[3].Plain() {
		t.Error("only wait-and-widen-prefix should drive plain clients")
	}
	if s.TrafficPattern.Kind != scenario.KindPrefixReuse || s.Backends.Count != 4 {
		t.Errorf("demo is %s on %d backends, want prefix_reuse on 4", s.TrafficPattern.Kind, s.Backends.Count)
	}
	doc, err := s.Algorithms[3].LBConfigJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"cache_affinity_backend_selection_count": 2`, `"cache_affinity_wait_ms": 200`, `"cache_affinity_input_tokens_scale": 0.1`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("affinity config lacks %s:\n%s", want, doc)
		}
	}
}

func TestUnknownFieldRejected(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want string }{
		{"top level", minimal + "colour: blue\n", `unknown field "colour"`},
		{"nested", strings.Replace(minimal, "  count: 2\n", "  count: 2\n  replicas: 3\n", 1), `unknown field "replicas"`},
		{"in algorithm config", strings.Replace(minimal, "{default: round-robin}", "{default: round-robin, extra: 1}", 1), `unknown field "extra"`},
		{"wrong kind field", strings.Replace(minimal, "  cache_affinity_keys: 8\n", "  cache_affinity_keys: 8\n  hotset_share: 0.5\n", 1), `traffic_pattern.hotset_share: is not a field of kind "uniform"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := scenario.Parse([]byte(tt.doc))
			if err == nil {
				t.Fatal("Parse accepted the document")
			}
			if !errors.Is(err, scenario.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestValidationMessages(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, from, to, want string }{
		{"request count", "request_count: 40", "request_count: 0", "request_count: is 0, want > 0"},
		{"kind", "kind: uniform", "kind: zipf", `traffic_pattern.kind: "zipf" is not a traffic pattern kind`},
		{"uniform bounds", "min: 10, max: 20", "min: 30, max: 20", "traffic_pattern.input_tokens: uniform min 30 is above max 20"},
		{"arrival", "{distribution: constant, interval_ms: 10}", "{distribution: poisson}", "traffic_pattern.arrival.target_rps: is required"},
		{"algorithm", "{default: round-robin}", "{default: roundish}", "algorithms[0].config:"},
		{"no algorithms", "algorithms:\n  - name: rr\n    config: {default: round-robin}\n", "algorithms: []\n", "algorithms: must list at least one algorithm"},
		{"grouping", "  count: 2\n", "  count: 3\n  pylons_per_cluster: 2\n", "backends.cluster_id_template"},
		{"client spread", "backends:\n", "stargates: {count: 2, client_spread: by-key}\nbackends:\n", `stargates.client_spread: is "by-key", want round-robin or affinity-key`},
		{"cluster backends", "{default: round-robin}", "{default: round-robin}\n    cluster_backends: first", `algorithms[0].cluster_backends: is "first", want "spread" or "lead"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc := strings.Replace(minimal, tt.from, tt.to, 1)
			if doc == minimal {
				t.Fatalf("%q not found in the document", tt.from)
			}
			_, err := scenario.Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// stargates.client_spread: round-robin unless affinity-key is asked for.
func TestClientSpread(t *testing.T) {
	t.Parallel()
	if parse(t, minimal).SpreadByAffinityKey() {
		t.Error("spread by key without client_spread")
	}
	for spread, want := range map[string]bool{"round-robin": false, "affinity-key": true} {
		doc := strings.Replace(minimal, "backends:\n", "stargates: {count: 2, client_spread: "+spread+"}\nbackends:\n", 1)
		if got := parse(t, doc).SpreadByAffinityKey(); got != want {
			t.Errorf("client_spread %s: by key %v, want %v", spread, got, want)
		}
	}
}

func TestSameSeedSameManifest(t *testing.T) {
	t.Parallel()
	for _, n := range scenarios.Names() {
		data, _ := scenarios.Read(n)
		s := parse(t, string(data))
		a, b := scenario.NewManifest(s, 11), scenario.NewManifest(s, 11)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%s: manifests of one seed differ (-first +second):\n%s", n, diff)
		}
		if c := scenario.NewManifest(s, 12); cmp.Equal(a.Requests, c.Requests) && s.TrafficPattern.Kind != scenario.KindUniform {
			t.Errorf("%s: seeds 11 and 12 give the same manifest", n)
		}
	}
}

func TestManifestShape(t *testing.T) {
	t.Parallel()
	s := parse(t, minimal)
	m := scenario.NewManifest(s, 7)
	r := m.Requests[3]
	if r.ID != "test-scenario-7-000003" {
		t.Errorf("ID %q", r.ID)
	}
	if r.Arrival != 30*time.Millisecond {
		t.Errorf("arrival %v, want 30ms (constant 10 ms)", r.Arrival)
	}
	for _, r := range m.Requests {
		if r.InputTokens < 10 || r.InputTokens > 20 || r.OutputTokens != 5 {
			t.Fatalf("request %d has %d/%d tokens", r.Index, r.InputTokens, r.OutputTokens)
		}
		if !strings.HasPrefix(r.AffinityKey, "test-scenario-cache-000") || r.RoutingKey != "" {
			t.Fatalf("request %d keys %q %q", r.Index, r.AffinityKey, r.RoutingKey)
		}
	}
}

func TestPrefixReuseGrowsOnlyBySuffix(t *testing.T) {
	t.Parallel()
	data, _ := scenarios.Read("lb-balance-prefix-reuse-4c2p-2s")
	s := parse(t, string(data))
	m := scenario.NewManifest(s, s.Seed)
	last := map[string]uint64{}
	reused := 0
	for _, r := range m.Requests {
		prev, seen := last[r.AffinityKey]
		switch {
		case !seen:
			if r.Class != scenario.ClassPrefixStart || r.InputTokens != 65536 {
				t.Errorf("first request of %s: class %s, %d tokens", r.AffinityKey, r.Class, r.InputTokens)
			}
		default:
			reused++
			grow := r.InputTokens - prev
			if r.Class != scenario.ClassPrefixReuse || r.InputTokens <= prev || grow < 256 || grow > 1024 {
				t.Errorf("request %d of %s: class %s, %d → %d tokens (suffix must be in [256,1024])", r.Index, r.AffinityKey, r.Class, prev, r.InputTokens)
			}
		}
		last[r.AffinityKey] = r.InputTokens
	}
	if len(last) != 16 || reused != len(m.Requests)-16 {
		t.Errorf("%d sessions, %d reuses", len(last), reused)
	}
}

func TestHotset(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(minimal, "kind: uniform", "kind: zipf_hotset\n  hotset_fraction: FRACTION\n  hotset_share: 0.9", 1)
	t.Run("zero fraction gives only cold", func(t *testing.T) {
		t.Parallel()
		s := parse(t, strings.Replace(doc, "FRACTION", "0", 1))
		for _, r := range scenario.NewManifest(s, 3).Requests {
			if r.Class != scenario.ClassCold {
				t.Fatalf("request %d is %s", r.Index, r.Class)
			}
		}
	})
	t.Run("hot requests use the hot set", func(t *testing.T) {
		t.Parallel()
		s := parse(t, strings.Replace(doc, "FRACTION", "0.25", 1))
		hot := 0
		for _, r := range scenario.NewManifest(s, 3).Requests {
			if r.Class == scenario.ClassHot {
				hot++
				if r.AffinityKey != "test-scenario-cache-0000" && r.AffinityKey != "test-scenario-cache-0001" {
					t.Errorf("hot request %d uses %s, outside the 2-key hot set", r.Index, r.AffinityKey)
				}
			}
		}
		if hot < 28 {
			t.Errorf("%d of 40 requests hot at share 0.9", hot)
		}
	})
	if got := scenario.HotsetSize(200, 0.001); got != 1 {
		t.Errorf("HotsetSize(200, 0.001) = %d, want 1", got)
	}
}

func TestArrivals(t *testing.T) {
	t.Parallel()
	data, _ := scenarios.Read("bursty-8-backends")
	s := parse(t, string(data))
	m := scenario.NewManifest(s, s.Seed)
	// burst (45 rps) for 16 requests, then quiet (4 rps): mean gaps differ widely.
	burst := m.Requests[15].Arrival - m.Requests[0].Arrival
	quiet := m.Requests[31].Arrival - m.Requests[16].Arrival
	if burst*3 > quiet {
		t.Errorf("burst span %v not much shorter than quiet span %v", burst, quiet)
	}
	for i := 1; i < len(m.Requests); i++ {
		if m.Requests[i].Arrival < m.Requests[i-1].Arrival || m.Requests[i].Arrival%time.Millisecond != 0 {
			t.Fatalf("arrival %d: %v after %v", i, m.Requests[i].Arrival, m.Requests[i-1].Arrival)
		}
	}
	if m.Requests[0].Class != scenario.ClassBurst || m.Requests[16].Class != scenario.ClassQuiet {
		t.Errorf("classes %s, %s", m.Requests[0].Class, m.Requests[16].Class)
	}
	data, _ = scenarios.Read("stair-step-2-stargates")
	s = parse(t, string(data))
	m = scenario.NewManifest(s, s.Seed)
	first := m.Requests[19].Arrival - m.Requests[0].Arrival // 4 rps
	last := m.Requests[99].Arrival - m.Requests[80].Arrival // 20 rps
	if last*2 > first {
		t.Errorf("stair step: first step %v, last step %v", first, last)
	}
}

func TestTopology(t *testing.T) {
	t.Parallel()
	data, _ := scenarios.Read("lb-balance-bursty-4c2p-2s")
	s := parse(t, string(data))
	top := s.Topology()
	if len(top.Backends) != 8 || len(top.Clusters) != 4 {
		t.Fatalf("%d backends, %d clusters", len(top.Backends), len(top.Clusters))
	}
	if b := top.Backends[3]; b.ID != "backend-3" || b.ClusterID != "cluster-1" || b.Profile.Name != "balanced-cluster" {
		t.Errorf("backend 3: %+v", b)
	}
	e := top.Clusters[0].Engine()
	want := scenario.EngineFlags{TokenDelayMs: 3, DecodeJitterMs: 2, TTFTMs: 35, TTFTJitterMs: 5, PrefillTokensPerS: 12000, MaxConcurrentRequests: 20, KVCacheCapacityTokens: 480000}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("engine of cluster 0 (-want +got):\n%s", diff)
	}
	if s.GatewayCount() != 2 {
		t.Errorf("gateways %d", s.GatewayCount())
	}
	single := parse(t, minimal).Topology()
	if single.Backends[1].ClusterID != "backend-1" {
		t.Errorf("ungrouped cluster id %q", single.Backends[1].ClusterID)
	}
}

func TestIgnored(t *testing.T) {
	t.Parallel()
	data, _ := scenarios.Read("queue-mismatch-retry-ab")
	got := parse(t, string(data)).Ignored()
	if len(got) != 1 || slices.ContainsFunc(got, func(f string) bool { return strings.Contains(f, "retry_after_ms") }) {
		t.Errorf("ignored %q (retry_after_ms maps to the pylon's --queue-mismatch-retry-after-ms)", got)
	}
	if got := parse(t, minimal+"tunnel_protocol: raw-quic\n").Ignored(); len(got) != 1 {
		t.Errorf("ignored %q", got)
	}
}

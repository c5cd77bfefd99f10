package simulate_test

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/scenarios"
	"github.com/switchyard/switchyard/bench/simulate"
)

func bundled(t *testing.T, name string) *scenario.Scenario {
	t.Helper()
	data, err := scenarios.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenario.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func algorithm(t *testing.T, s *scenario.Scenario, name string) *scenario.Algorithm {
	t.Helper()
	for i := range s.Algorithms {
		if s.Algorithms[i].Name == name {
			return &s.Algorithms[i]
		}
	}
	t.Fatalf("no algorithm %s", name)
	return nil
}

// The engine model: one slot, 100 input tokens at 1000 tokens/s and a 10 ms fixed TTFT give
// 111 ms to the first token (with the 1 ms round trip); a second request sent at the same
// moment waits for the slot (two output tokens 10 ms apart: 121 ms) and reuses nothing.
func TestEngineModel(t *testing.T) {
	t.Parallel()
	s, err := scenario.Parse([]byte(`
name: tiny
model: m
seed: 1
request_count: 2
max_concurrency: 2
backends:
  count: 1
  profile:
    name: one
    max_concurrent_requests: 1
    kv_cache_capacity_tokens: 1000
    service_time_ms: {ttft_mean: 10, prefill_tokens_per_s: 1000, decode_tokens_per_s: 100}
    registration: {last_mean_input_tps: 1000}
traffic_pattern:
  kind: uniform
  input_tokens: {distribution: constant, value: 100}
  output_tokens: {distribution: constant, value: 2}
  arrival: {distribution: constant, interval_ms: 0}
algorithms:
  - name: rr
    config: {default: round-robin}
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := simulate.Run(s, &s.Algorithms[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Served != 2 || r.Failed != 0 || r.TTFTP50 < 111*time.Millisecond || r.TTFTMean < 111*time.Millisecond {
		t.Errorf("result %+v", r)
	}
	if want := (111*time.Millisecond + (111+121)*time.Millisecond) / 2; r.TTFTMean > want+time.Millisecond || r.TTFTMean < want-time.Millisecond {
		t.Errorf("mean TTFT %v, want ≈ %v (111 ms, then 121 ms of slot wait + 111 ms)", r.TTFTMean, want)
	}
}

// On demo the simulation ranks the algorithms as the real runs do: cache-affine
// wait-and-widen has the most cache hits and the lowest mean TTFT, round-robin the
// highest TTFT; every request is answered, and the same inputs give the same results.
func TestDemoRanking(t *testing.T) {
	t.Parallel()
	s := bundled(t, "demo")
	res := map[string]simulate.Result{}
	for i := range s.Algorithms {
		r, err := simulate.Run(s, &s.Algorithms[i])
		if err != nil {
			t.Fatal(err)
		}
		if r.Served+r.Failed != s.RequestCount {
			t.Errorf("%s: %d served + %d failed of %d", r.Algorithm, r.Served, r.Failed, s.RequestCount)
		}
		res[r.Algorithm] = r
	}
	aff, rr := res["wait-and-widen-affinity"], res["round-robin"]
	for name, r := range res {
		if name != aff.Algorithm && (r.CacheHitRate >= aff.CacheHitRate || r.TTFTMean <= aff.TTFTMean) {
			t.Errorf("%s (hit %.3f, mean %v) not behind wait-and-widen-affinity (hit %.3f, mean %v)", name, r.CacheHitRate, r.TTFTMean, aff.CacheHitRate, aff.TTFTMean)
		}
		if name != rr.Algorithm && r.TTFTMean >= rr.TTFTMean {
			t.Errorf("%s mean TTFT %v not below round-robin's %v", name, r.TTFTMean, rr.TTFTMean)
		}
	}
	again, err := simulate.Run(s, algorithm(t, s, "wait-and-widen-affinity"))
	if err != nil || again != aff {
		t.Errorf("a second run differs: %+v vs %+v (%v)", again, aff, err)
	}
}

// A 3 × 3 grid over the affinity hold and the prefill scale: nine points in row-major
// order, each run with its settings.
func TestGrid(t *testing.T) {
	t.Parallel()
	s := bundled(t, "demo")
	a := algorithm(t, s, "wait-and-widen-affinity")
	x, err := simulate.ParseAxis("cache_affinity_wait_ms=0,100,200")
	if err != nil {
		t.Fatal(err)
	}
	scale, err := simulate.ParseAxis("cache_affinity_input_tokens_scale=0.1, 0.5, 1")
	if err != nil {
		t.Fatal(err)
	}
	points, err := simulate.Grid(s, a, []simulate.Axis{x, scale}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 9 {
		t.Fatalf("%d points, want 9", len(points))
	}
	if p := points[5]; p.Settings[0] != 100 || p.Settings[1] != 1 || p.Result.Algorithm != "cache_affinity_wait_ms=100,cache_affinity_input_tokens_scale=1" {
		t.Errorf("point 5: %+v", p)
	}
	for _, p := range points {
		if p.Result.Served+p.Result.Failed != s.RequestCount {
			t.Errorf("%s: %+v", p.Result.Algorithm, p.Result)
		}
	}
	if _, err := simulate.ParseAxis("n"); err == nil {
		t.Error("an axis without values accepted")
	}
	if _, err := simulate.Grid(s, algorithm(t, s, "round-robin"), []simulate.Axis{x}, 1); err == nil {
		t.Error("a grid over a name-only entry accepted")
	}
}

// RunSeeds averages over consecutive seeds: with one seed it is Run; with three it counts
// every request of the three manifests.
func TestRunSeeds(t *testing.T) {
	t.Parallel()
	s := bundled(t, "demo")
	a := algorithm(t, s, "wait-and-widen")
	one, err := simulate.Run(s, a)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := simulate.RunSeeds(s, a, 1); err != nil || r != one {
		t.Errorf("one seed: %+v, want %+v (%v)", r, one, err)
	}
	three, err := simulate.RunSeeds(s, a, 3)
	if err != nil || three.Served+three.Failed != 3*s.RequestCount || three == one {
		t.Errorf("three seeds: %+v (%v)", three, err)
	}
}

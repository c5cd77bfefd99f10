package score_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/internal/testkit/scoretest"
)

func f64(v float64) *float64 { return &v }

// run is a summary with a cache hit rate (nil: no cache headers) and a mean TTFT.
func run(name string, hit *float64, ttftMs int) score.Summary {
	s := score.Summary{Algorithm: name, Requests: 10, Successes: 10, SuccessRate: 1}
	s.Cache.HitRate = hit
	if ttftMs > 0 {
		s.TTFT = score.Latency{Count: 10, Avg: time.Duration(ttftMs) * time.Millisecond}
	}
	return s
}

func scenarioOf(algorithms []string, expect ...scenario.Expectation) *scenario.Scenario {
	s := &scenario.Scenario{Expect: expect}
	for _, a := range algorithms {
		s.Algorithms = append(s.Algorithms, scenario.Algorithm{Name: a})
	}
	return s
}

func statuses(outs []score.Outcome) []score.Status {
	st := make([]score.Status, 0, len(outs))
	for i := range outs {
		st = append(st, outs[i].Status)
	}
	return st
}

// Each comparison op against an absolute value, met and missed, including the tolerance
// of the non-strict ops.
func TestEvaluateOps(t *testing.T) {
	t.Parallel()
	runs := []score.Summary{run("a", f64(0.5), 100)}
	for _, c := range []struct {
		op    string
		value float64
		want  score.Status
	}{
		{">=", 0.5, score.Met},
		{">=", 0.5 + 1e-12, score.Met},
		{">=", 0.6, score.Missed},
		{">", 0.4, score.Met},
		{">", 0.5, score.Missed},
		{"<=", 0.5, score.Met},
		{"<=", 0.4, score.Missed},
		{"<", 0.6, score.Met},
		{"<", 0.5, score.Missed},
		{"==", 0.5, score.Met},
		{"==", 0.5 - 1e-12, score.Met},
		{"==", 0.6, score.Missed},
	} {
		s := scenarioOf([]string{"a"}, scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "a", Op: c.op, Value: f64(c.value)})
		outs := score.Evaluate(s, runs)
		if len(outs) != 1 || outs[0].Status != c.want {
			t.Errorf("0.5 %s %v: %+v, want %s", c.op, c.value, outs, c.want)
			continue
		}
		if d := cmp.Diff([]score.Observed{{Algorithm: "a", Value: f64(0.5)}}, outs[0].Observed); d != "" {
			t.Errorf("observed (-want +got):\n%s", d)
		}
	}
}

// ratio_to compares with value × the other algorithm's metric: no division, so a zero
// reference is a plain bound of 0.
func TestEvaluateRatio(t *testing.T) {
	t.Parallel()
	runs := []score.Summary{run("a", f64(0.9), 100), run("b", f64(0.45), 300), run("zero", f64(0), 100)}
	names := []string{"a", "b", "zero"}
	ratio := func(to string, v float64) scenario.Expectation {
		return scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "a", Op: ">=", RatioTo: to, Value: f64(v)}
	}
	outs := score.Evaluate(scenarioOf(names, ratio("b", 2), ratio("b", 2.1), ratio("zero", 1.8)), runs)
	if d := cmp.Diff([]score.Status{score.Met, score.Missed, score.Met}, statuses(outs)); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
	want := score.Outcome{
		Entry: 0, Metric: "cache_hit_rate", Algorithm: "a", Op: ">=", Value: f64(2), RatioTo: "b",
		Check: "cache_hit_rate of a >= 2 × b's", Status: score.Met,
		Observed: []score.Observed{{Algorithm: "a", Value: f64(0.9)}, {Algorithm: "b", Value: f64(0.45)}},
	}
	if d := cmp.Diff(want, outs[0]); d != "" {
		t.Errorf("outcome (-want +got):\n%s", d)
	}
}

// "*" as algorithm gives one check per algorithm that ran; "*" as ratio_to one per other
// algorithm; "*" against a named ratio_to leaves out the named one itself.
func TestEvaluateEveryAlgorithm(t *testing.T) {
	t.Parallel()
	runs := []score.Summary{run("a", f64(0.9), 100), run("b", f64(0.4), 250), run("c", f64(0.5), 190)}
	runs[1].SuccessRate = 0.9
	s := scenarioOf([]string{"a", "b", "c"},
		scenario.Expectation{Metric: "success_rate", Algorithm: "*", Op: "==", Value: f64(1)},
		scenario.Expectation{Metric: "ttft_mean_ms", Algorithm: "a", Op: "<=", RatioTo: "*", Value: f64(0.5)},
		scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "*", Op: ">=", RatioTo: "b", Value: f64(1)},
	)
	outs := score.Evaluate(s, runs)
	type row struct {
		Entry         int
		Alg, To       string
		Status        score.Status
		Check         string
		ObservedCount int
	}
	got := make([]row, 0, len(outs))
	for _, o := range outs {
		got = append(got, row{o.Entry, o.Algorithm, o.RatioTo, o.Status, o.Check, len(o.Observed)})
	}
	want := []row{
		{0, "a", "", score.Met, "success_rate of a == 1", 1},
		{0, "b", "", score.Missed, "success_rate of b == 1", 1},
		{0, "c", "", score.Met, "success_rate of c == 1", 1},
		{1, "a", "b", score.Met, "ttft_mean_ms of a <= 0.5 × b's", 2},
		{1, "a", "c", score.Missed, "ttft_mean_ms of a <= 0.5 × c's", 2},
		{2, "a", "b", score.Met, "cache_hit_rate of a >= 1 × b's", 2},
		{2, "c", "b", score.Met, "cache_hit_rate of c >= 1 × b's", 2},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("outcomes (-want +got):\n%s", d)
	}
	if n := score.MissedCount(outs); n != 2 {
		t.Errorf("MissedCount %d, want 2", n)
	}
}

// lowest and highest compare with every other algorithm; ties count as met; an other
// algorithm whose metric is undefined is left out of the ranking.
func TestEvaluateRanks(t *testing.T) {
	t.Parallel()
	runs := []score.Summary{run("a", f64(0.8), 100), run("b", f64(0.8), 100), run("c", nil, 0), run("d", f64(0.3), 90)}
	s := scenarioOf([]string{"a", "b", "c", "d"},
		scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "a", Op: "highest"},
		scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "d", Op: "highest"},
		scenario.Expectation{Metric: "ttft_mean_ms", Algorithm: "d", Op: "lowest"},
		scenario.Expectation{Metric: "ttft_mean_ms", Algorithm: "a", Op: "lowest"},
	)
	outs := score.Evaluate(s, runs)
	if d := cmp.Diff([]score.Status{score.Met, score.Missed, score.Met, score.Missed}, statuses(outs)); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
	wantObserved := []score.Observed{
		{Algorithm: "a", Value: f64(0.8)}, {Algorithm: "b", Value: f64(0.8)}, {Algorithm: "c"}, {Algorithm: "d", Value: f64(0.3)},
	}
	if d := cmp.Diff(wantObserved, outs[0].Observed); d != "" {
		t.Errorf("observed (-want +got):\n%s", d)
	}
	if outs[0].Check != "cache_hit_rate of a highest of all" {
		t.Errorf("check %q", outs[0].Check)
	}
}

// A check needing an algorithm that did not run is skipped (not missed); a metric that is
// undefined in the run misses, with the reason.
func TestEvaluateSkippedAndUndefined(t *testing.T) {
	t.Parallel()
	runs := []score.Summary{run("a", nil, 100), run("b", f64(0.5), 0)}
	s := scenarioOf([]string{"a", "b", "c"},
		scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "c", Op: ">", Value: f64(0)},
		scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "b", Op: ">=", RatioTo: "c", Value: f64(1)},
		scenario.Expectation{Metric: "ttft_mean_ms", Algorithm: "a", Op: "lowest"},
		scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "a", Op: ">", Value: f64(0)},
		scenario.Expectation{Metric: "cache_hit_rate", Algorithm: "b", Op: ">=", RatioTo: "a", Value: f64(1)},
		scenario.Expectation{Metric: "ttft_p99_ms", Algorithm: "b", Op: "<", Value: f64(1000)},
		scenario.Expectation{Metric: "success_rate", Algorithm: "*", Op: "==", Value: f64(1)},
	)
	outs := score.Evaluate(s, runs)
	type row struct {
		Status score.Status
		Reason string
	}
	got := make([]row, 0, len(outs))
	for _, o := range outs {
		got = append(got, row{o.Status, o.Reason})
	}
	want := []row{
		{score.Skipped, "c did not run"},
		{score.Skipped, "c did not run"},
		{score.Skipped, "lowest ranks every algorithm and c did not run"},
		{score.Missed, "cache_hit_rate is undefined for a"},
		{score.Missed, "cache_hit_rate is undefined for a"},
		{score.Missed, "ttft_p99_ms is undefined for b"},
		{score.Met, ""},
		{score.Met, ""}, // "*" covers the algorithms that ran
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("outcomes (-want +got):\n%s", d)
	}
	if n := score.MissedCount(outs); n != 3 {
		t.Errorf("MissedCount %d, want 3", n)
	}
}

func TestEvaluateWithoutExpectIsEmpty(t *testing.T) {
	t.Parallel()
	if outs := score.Evaluate(scenarioOf([]string{"a"}), []score.Summary{run("a", nil, 1)}); outs != nil {
		t.Errorf("outcomes %+v", outs)
	}
}

// Every metric an expectation may name has a value in a scored run that has the data,
// and the derived ones are what the summary says.
func TestMetricValueCoversEveryMetric(t *testing.T) {
	t.Parallel()
	in := scoretest.Input("x", 12)
	s := score.Score(&in)
	for _, m := range scenario.Metrics() {
		if _, ok := score.MetricValue(&s, m); !ok {
			t.Errorf("%s: undefined in a full run", m)
		}
	}
	if _, ok := score.MetricValue(&s, "no_such_metric"); ok {
		t.Error("unknown metric has a value")
	}
	want := map[string]float64{
		scenario.MetricMaxClusterShare:   max(s.Clusters[0].RequestShare, s.Clusters[1].RequestShare),
		scenario.MetricWeakestShare:      s.Backends[2].RequestShare + s.Backends[3].RequestShare, // capacity 100 against 300
		scenario.MetricRetries:           4,                                                       // 3 queue_estimate_mismatch + 1 connect_failover
		scenario.MetricFallbacks:         3,
		scenario.MetricAdmissionRejected: 3,
		scenario.MetricFailures:          float64(s.Requests - s.Successes),
		scenario.MetricGoodput:           s.SuccessfulRPS,
		scenario.MetricTTFTP99:           float64(s.TTFT.P99) / float64(time.Millisecond),
	}
	for m, v := range want {
		if got, _ := score.MetricValue(&s, m); got != v {
			t.Errorf("%s = %v, want %v", m, got, v)
		}
	}
	var empty score.Summary
	for _, m := range []string{scenario.MetricMaxClusterShare, scenario.MetricWeakestShare, scenario.MetricTTFTMean, scenario.MetricCacheHitRate, scenario.MetricSuccessRate, scenario.MetricGoodput} {
		if _, ok := score.MetricValue(&empty, m); ok {
			t.Errorf("%s defined in an empty run", m)
		}
	}
}

// The weakest backends' share is undefined when no backend is weaker than another.
func TestWeakestShareNeedsUnequalCapacities(t *testing.T) {
	t.Parallel()
	in := scoretest.Input("x", 12)
	for i := range in.Backends {
		in.Backends[i].CapacityTPS = 200
	}
	s := score.Score(&in)
	if v, ok := score.WeakestShare(&s); ok {
		t.Errorf("equal capacities: weakest share %v, want undefined", v)
	}
	in.Backends[3].CapacityTPS = 50
	s = score.Score(&in)
	if v, ok := score.WeakestShare(&s); !ok || v != s.Backends[3].RequestShare {
		t.Errorf("one weak backend: weakest share %v (%v), want %v", v, ok, s.Backends[3].RequestShare)
	}
}

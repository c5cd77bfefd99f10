package score_test

import (
	"encoding/json"
	"flag"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/internal/testkit/scoretest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	scoretest.Golden(t, *update, name, got)
}

func TestScoreGolden(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		skew int
	}{{"spread", 0}, {"skewed", 12}} {
		in := scoretest.Input(tt.name, tt.skew)
		s := score.Score(&in)
		got, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "summary-"+tt.name+".json", append(got, '\n'))
	}
}

func TestScoreFigures(t *testing.T) {
	t.Parallel()
	in := scoretest.Input("x", 0)
	s := score.Score(&in)
	if s.Requests != 20 || s.Successes != 18 || s.SuccessRate != 0.9 {
		t.Errorf("requests %d successes %d rate %v", s.Requests, s.Successes, s.SuccessRate)
	}
	if s.SuccessfulRPS != 4.5 || s.OutputGoodput != 45 {
		t.Errorf("rps %v goodput %v", s.SuccessfulRPS, s.OutputGoodput)
	}
	if s.EngineQueued != 2 { // requests 0 and 12: backend-0, every third
		t.Errorf("engine queued %d, want 2", s.EngineQueued)
	}
	if len(s.Failures) != 2 || s.Failures[0].Count != 1 {
		t.Errorf("failures %+v", s.Failures)
	}
	if *s.PylonEqualBalance < 0.9 || *s.PylonCapacityBalance > 0.8 {
		t.Errorf("balances %v %v", *s.PylonEqualBalance, *s.PylonCapacityBalance)
	}
	c := s.Counters
	if c.QueueMismatchRetries != 3 || c.FallbackChoices != 3 || c.PrimaryChoices != 16 || c.KVFreeFallback != 1 ||
		c.RetryExhaustedTotal != 1 || c.AdmissionDecisions["rejected"] != 3 {
		t.Errorf("counters %+v", c)
	}
	// Every key visits several backends when the spread ignores keys.
	if s.Stickiness.Keys != 5 || s.Stickiness.Moved != 5 {
		t.Errorf("stickiness %+v", s.Stickiness)
	}
}

func TestBalances(t *testing.T) {
	t.Parallel()
	if b := *score.EqualBalance([]float64{0.25, 0.25, 0.25, 0.25}); b != 1 {
		t.Errorf("even balance %v", b)
	}
	if b := *score.EqualBalance([]float64{1, 0, 0, 0}); b != 0 {
		t.Errorf("all on one of four %v", b)
	}
	if b := *score.EqualBalance([]float64{0.5, 0.5, 0, 0}); b != 0 {
		t.Errorf("half on two of four %v", b)
	}
	if score.EqualBalance(nil) != nil || score.CapacityBalance([]float64{1}, []float64{0}) != nil {
		t.Error("empty balances are not nil")
	}
	if b := *score.CapacityBalance([]float64{0.75, 0.25}, []float64{300, 100}); b != 1 {
		t.Errorf("capacity-proportional %v", b)
	}
	if b := *score.CapacityBalance([]float64{0, 1}, []float64{300, 100}); b != 0.25 {
		t.Errorf("inverse capacity %v", b)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var s []time.Duration
	for i := 1; i <= 10; i++ {
		s = append(s, time.Duration(i))
	}
	// sorted[round((n−1)q)]: q=0.95 → round(8.55) = 9 → 10; q=0.5 → round(4.5) = 5 → 6.
	if p := score.Percentile(s, 0.95); p != 10 {
		t.Errorf("p95 %v", p)
	}
	if p := score.Percentile(s, 0.5); p != 6 {
		t.Errorf("p50 %v", p)
	}
	if p := score.Percentile(nil, 0.5); p != 0 {
		t.Errorf("empty %v", p)
	}
	l := score.Summarize([]time.Duration{3, 1, 2})
	if l != (score.Latency{Count: 3, Avg: 2, P50: 2, P95: 3, P99: 3, Max: 3}) {
		t.Errorf("summary %+v", l)
	}
}

func TestParseSeries(t *testing.T) {
	t.Parallel()
	got := score.ParseSeries(`x_total{a="1",b="q\"uote",c=""}`)
	want := score.Series{Name: "x_total", Labels: map[string]string{"a": "1", "b": `q"uote`, "c": ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	m := score.ParseMetrics("# c\nplain 3\nwith{l=\"v\"} 2.5 1700000000\nbad{ x\n")
	if diff := cmp.Diff(map[string]float64{"plain": 3, `with{l="v"}`: 2.5}, m); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNoKVHeadersWarns(t *testing.T) {
	t.Parallel()
	in := scoretest.Input("x", 0)
	for i := range in.Records {
		in.Records[i].KV = nil
	}
	in.Backends = nil
	s := score.Score(&in)
	if len(s.Warnings) != 1 || s.Cache.HitRate != nil {
		t.Errorf("warnings %q, hit rate %v", s.Warnings, s.Cache.HitRate)
	}
	if len(s.Backends) != 4 || s.PylonCapacityBalance != nil || s.Backends[0].ID != "backend-0" {
		t.Errorf("backends from records: %+v", s.Backends)
	}
}

package report_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/bench/report"
	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/internal/testkit/scoretest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	scoretest.Golden(t, *update, name, got)
}

func fixture() *report.Report {
	runs := make([]report.Run, 0, 2)
	for _, a := range []struct {
		name string
		skew int
	}{{"round-robin", 0}, {"wait-and-widen|affinity", 12}} {
		in := scoretest.Input(a.name, a.skew)
		runs = append(runs, report.Run{Summary: score.Score(&in), Records: in.Records})
	}
	return &report.Report{
		Meta: report.Meta{
			Scenario: "fixture", Description: "A fixed run for golden tests.", ExpectedSignal: "Affinity keeps keys in place.",
			Seed: 1, Requests: 20, MaxConcurrency: 4, Backends: 4, Clusters: 2, Gateways: 1, TimeScale: 0.5,
			Ignored:  []string{"tunnel_protocol (the gateway and pylons talk HTTP/1.1 on loopback)"},
			Charts:   report.Charts(runs),
			Profiles: map[string]string{"backend-0": "fast", "backend-1": "fast", "backend-2": "slow", "backend-3": "slow"},
		},
		Runs: runs,
	}
}

func TestMarkdownGolden(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := report.Markdown(&b, fixture()); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.md", b.Bytes())
}

func TestJSONGolden(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := report.JSON(&b, fixture()); err != nil {
		t.Fatal(err)
	}
	golden(t, "results.json", b.Bytes())
}

func TestTableGolden(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := report.Table(&b, fixture().Runs); err != nil {
		t.Fatal(err)
	}
	golden(t, "table.txt", b.Bytes())
}

func TestCharts(t *testing.T) {
	t.Parallel()
	r := fixture()
	if got := report.TimelineFile("wait-and-widen|affinity"); got != "backends-wait-and-widen-affinity.png" {
		t.Errorf("timeline file %q", got)
	}
	for name, draw := range map[string]func(*bytes.Buffer) error{
		"ttft":     func(b *bytes.Buffer) error { return report.TTFTCDF(b, r.Runs) },
		"cache":    func(b *bytes.Buffer) error { return report.CacheHitRates(b, r.Runs) },
		"timeline": func(b *bytes.Buffer) error { return report.Timeline(b, &r.Runs[1], time.Second, r.Profiles) },
	} {
		var b bytes.Buffer
		if err := draw(&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		img, err := png.Decode(&b)
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		if sz := img.Bounds().Size(); sz.X < 500 || sz.Y < 300 {
			t.Errorf("%s: image %v", name, sz)
		}
	}
}

// fixtureWithExpect is the fixture with outcomes of every kind: met and missed
// comparisons, a ratio, "*", a rank and a check skipped because its algorithm did not run.
func fixtureWithExpect() *report.Report {
	r := fixture()
	s := &scenario.Scenario{
		Algorithms: []scenario.Algorithm{{Name: "round-robin"}, {Name: "wait-and-widen|affinity"}, {Name: "pulsar"}},
		Expect: []scenario.Expectation{
			{Metric: "cache_hit_rate", Algorithm: "round-robin", Op: ">=", RatioTo: "wait-and-widen|affinity", Value: ptr(1.5), Note: "spread keeps prefixes warm"},
			{Metric: "success_rate", Algorithm: "*", Op: "==", Value: ptr(1)},
			{Metric: "ttft_p99_ms", Algorithm: "round-robin", Op: "<=", RatioTo: "*", Value: ptr(1)},
			{Metric: "fallbacks", Algorithm: "round-robin", Op: ">", Value: ptr(0)},
			{Metric: "max_cluster_share", Algorithm: "wait-and-widen|affinity", Op: "<=", Value: ptr(0.6)},
			{Metric: "goodput_rps", Algorithm: "pulsar", Op: ">=", Value: ptr(1)},
		},
	}
	sums := make([]score.Summary, 0, len(r.Runs))
	for i := range r.Runs {
		sums = append(sums, r.Runs[i].Summary)
	}
	r.Expectations = score.Evaluate(s, sums)
	return r
}

func ptr(v float64) *float64 { return &v }

// The expectations in the terminal output, in report.md (a verdict per check in the
// headline and their own section after the summary) and in results.json; none of them without an expect section.
func TestExpectationsGolden(t *testing.T) {
	t.Parallel()
	r := fixtureWithExpect()
	var txt bytes.Buffer
	if err := report.Expectations(&txt, r.Expectations); err != nil {
		t.Fatal(err)
	}
	golden(t, "expect.txt", txt.Bytes())

	var md bytes.Buffer
	if err := report.Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	doc := md.String()
	start := strings.Index(doc, "## Expectations")
	end := strings.Index(doc, "## Charts")
	if start < 0 || end < start || start < strings.Index(doc, "## Summary") {
		t.Fatalf("no expectations section between the summary and the charts:\n%s", doc)
	}
	golden(t, "expect.md", []byte(doc[start:end]))
	// The headline: the short table, then the count and one verdict line per check.
	hs, he := strings.Index(doc, "## Summary"), strings.Index(doc, "### All figures")
	if hs < 0 || he < hs {
		t.Fatalf("no headline before the full summary table:\n%s", doc)
	}
	golden(t, "headline.md", []byte(doc[hs:he]))

	var js bytes.Buffer
	if err := report.JSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var back report.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r.Expectations, back.Expectations); d != "" {
		t.Errorf("results.json expectations (-want +got):\n%s", d)
	}

	plain := fixture()
	txt.Reset()
	md.Reset()
	js.Reset()
	if err := report.Expectations(&txt, plain.Expectations); err != nil || txt.Len() != 0 {
		t.Errorf("terminal output without expectations: %q, %v", txt.String(), err)
	}
	if err := report.Markdown(&md, plain); err != nil || strings.Contains(md.String(), "Expectations") {
		t.Errorf("report.md without expectations mentions them (%v)", err)
	}
	if err := report.JSON(&js, plain); err != nil || strings.Contains(js.String(), "expectations") {
		t.Errorf("results.json without expectations mentions them (%v)", err)
	}
}

func TestExpectCounts(t *testing.T) {
	t.Parallel()
	met, missed, skipped := report.ExpectCounts(fixtureWithExpect().Expectations)
	if met != 3 || missed != 3 || skipped != 1 {
		t.Errorf("met %d, missed %d, skipped %d; want 3, 3, 1", met, missed, skipped)
	}
}

// report.md's header says how clients were spread over several gateways, and only when
// they went by affinity key.
func TestMarkdownClientSpread(t *testing.T) {
	t.Parallel()
	const note = "behind 2 gateway(s) (clients spread over them by affinity-key)"
	for spread, want := range map[string]bool{"": false, "affinity-key": true} {
		r := fixture()
		r.Gateways, r.ClientSpread = 2, spread
		var md bytes.Buffer
		if err := report.Markdown(&md, r); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(md.String(), note); got != want {
			t.Errorf("client spread %q: note present %v, want %v", spread, got, want)
		}
	}
}

// A replica comparison's report has a table of each algorithm's runs against its run with
// the first count: TTFT p95 as a ratio, cache hits in points; other reports have none.
func TestMarkdownReplicas(t *testing.T) {
	t.Parallel()
	var plain bytes.Buffer
	if err := report.Markdown(&plain, fixture()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "## Gateway replicas") {
		t.Error("a report without replica runs has a replica table")
	}

	r := fixture()
	r.Gateways, r.Replicas = 0, []int{1, 4}
	one, four := r.Runs[0], r.Runs[0]
	one.Base, one.Gateways, one.Summary.Algorithm = "round-robin", 1, "round-robin@1"
	four.Base, four.Gateways, four.Summary.Algorithm = "round-robin", 4, "round-robin@4"
	one.Summary.TTFT.P95, four.Summary.TTFT.P95 = 200*time.Millisecond, 210*time.Millisecond
	h1, h4 := 0.5, 0.48
	one.Summary.Cache.HitRate, four.Summary.Cache.HitRate = &h1, &h4
	one.Summary.EngineQueued, four.Summary.EngineQueued = 0, 3
	r.Runs = []report.Run{one, four}
	var md bytes.Buffer
	if err := report.Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"behind 1, 4 gateway(s), one run per count",
		"## Gateway replicas",
		"| round-robin | 1 | 200.0 ms | 1.00× | 50.0 % | +0.0 pt | 0 |",
		"| round-robin | 4 | 210.0 ms | 1.05× | 48.0 % | -2.0 pt | 3 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

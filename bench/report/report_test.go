package report_test

import (
	"bytes"
	"flag"
	"image/png"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/report"
	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/bench/score/scoretest"
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
			Ignored: []string{"tunnel_protocol (the gateway and pylons talk HTTP/1.1 on loopback)"},
			Charts:  report.Charts(runs),
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
		"timeline": func(b *bytes.Buffer) error { return report.Timeline(b, &r.Runs[1], time.Second) },
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

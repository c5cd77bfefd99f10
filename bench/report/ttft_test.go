package report_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/report"
	"github.com/switchyard/switchyard/bench/score"
)

// Runs with TTFT-estimate figures get the accuracy table in report.md and the terminal
// summary; runs without (the golden fixture) get neither.
func TestTTFTEstimateTable(t *testing.T) {
	t.Parallel()
	r := fixture()
	var md, tbl bytes.Buffer
	if err := report.Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := report.Table(&tbl, r.Runs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(md.String(), "TTFT estimate accuracy") || strings.Contains(tbl.String(), "ttft estimate error") {
		t.Fatal("a TTFT estimate table without figures")
	}
	r.Runs[0].Summary.TTFTEstimate = &score.EstimateError{
		Attempts: 320, P50Relative: 0.023, P90Relative: 0.938, P50: 8900 * time.Microsecond, P90: 709 * time.Millisecond, Exceeded: 0.231,
	}
	md.Reset()
	tbl.Reset()
	if err := report.Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := report.Table(&tbl, r.Runs); err != nil {
		t.Fatal(err)
	}
	name := r.Runs[0].Summary.Algorithm
	if want := "| " + name + " | 320 | 2.3 % | 93.8 % | 8.9 ms | 709.0 ms | 23.1 % |"; !strings.Contains(md.String(), want) {
		t.Errorf("report.md lacks the row %q:\n%s", want, md.String())
	}
	if other := r.Runs[1].Summary.Algorithm; strings.Contains(md.String(), "| "+other+" | 0 |") {
		t.Errorf("a row for %s, which has no figures", other)
	}
	if !strings.Contains(tbl.String(), "ttft estimate error p50") || !strings.Contains(tbl.String(), "2.3 %") {
		t.Errorf("terminal table lacks the TTFT estimate lines:\n%s", tbl.String())
	}
}

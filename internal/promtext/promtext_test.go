package promtext_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/switchyard/switchyard/internal/promtext"
)

// Page fills in the help texts of the binary's families and of the runtime's, writes each
// family's TYPE once, and renames or retypes the runtime series that break the conventions.
func TestPageWritesHelpAndTypes(t *testing.T) {
	s := metrics.NewSet()
	s.NewCounter(`x_requests_total{status="200"}`).Inc()
	s.NewCounter(`x_requests_total{status="503"}`)
	s.NewGauge(`x_parked`, nil).Set(3)
	s.NewPrometheusHistogram(`x_wait_seconds`).Update(0.2)
	s.NewCounter(`x_undocumented_total`)
	page := promtext.Page{Prefix: "x_", Help: map[string]string{
		"requests_total": "Finished requests.\nBy status \\ code.",
		"parked":         "Requests parked.",
		"wait_seconds":   "Wait.",
	}}
	var b bytes.Buffer
	page.Write(&b, s.WritePrometheus)
	out := b.String()
	for _, want := range []string{
		"# HELP x_requests_total Finished requests.\\nBy status \\\\ code.\n# TYPE x_requests_total counter\nx_requests_total{status=\"200\"} 1\nx_requests_total{status=\"503\"} 0\n",
		"# HELP x_parked Requests parked.\n# TYPE x_parked gauge\nx_parked 3\n",
		"# HELP x_wait_seconds Wait.\n# TYPE x_wait_seconds histogram\n",
		"# HELP x_undocumented_total\n", // no text: promtool reports it (the binaries' tests run promtool)
		"# HELP go_goroutines Goroutines that exist.\n# TYPE go_goroutines gauge\n",
		"# TYPE go_gc_forced_total counter\ngo_gc_forced_total ",
		"# TYPE process_io_read_bytes_total counter\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q:\n%s", want, out)
		}
	}
	for _, gone := range []string{"go_gc_forced_count", "go_cpu_count", "go_cgo_calls_count"} {
		if strings.Contains(out, gone) {
			t.Errorf("the page still has %s", gone)
		}
	}
	if n := strings.Count(out, "# TYPE x_requests_total "); n != 1 {
		t.Errorf("x_requests_total has %d TYPE lines, want 1", n)
	}
}

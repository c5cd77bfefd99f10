package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/score"
)

// metricText renders one value of metric in its unit; "n/a" when undefined.
func metricText(metric string, v *float64) string {
	switch {
	case v == nil:
		return "n/a"
	case strings.HasSuffix(metric, "_ms"):
		return fmt.Sprintf("%.1f ms", *v)
	case strings.HasSuffix(metric, "_rps"):
		return fmt.Sprintf("%.2f/s", *v)
	case strings.HasSuffix(metric, "_tps"):
		return fmt.Sprintf("%.1f tok/s", *v)
	case slices.Contains(countMetrics, metric):
		return num(*v)
	}
	return fmt.Sprintf("%.3f", *v)
}

// countMetrics are the expectation metrics that count events (the others are rates,
// shares and balances, or carry their unit in their name).
var countMetrics = []string{
	scenario.MetricCacheEvictions, scenario.MetricFallbacks, scenario.MetricRetries, scenario.MetricQueueMismatchRetries,
	scenario.MetricAdmissionRejected, scenario.MetricAdmissionDisabled, scenario.MetricFailures,
}

// observedText renders an outcome's observed values: the algorithm's, then the one it
// was compared with (and the ratio) or every other algorithm's.
func observedText(o *score.Outcome) string {
	if len(o.Observed) == 0 {
		return ""
	}
	first := o.Observed[0]
	text := metricText(o.Metric, first.Value)
	rest := o.Observed[1:]
	if len(rest) == 0 {
		return text
	}
	others := make([]string, 0, len(rest))
	for _, b := range rest {
		others = append(others, b.Algorithm+" "+metricText(o.Metric, b.Value))
	}
	text += " vs " + strings.Join(others, ", ")
	if o.RatioTo != "" && first.Value != nil && rest[0].Value != nil && *rest[0].Value != 0 {
		text += fmt.Sprintf(" (ratio %.2f)", *first.Value / *rest[0].Value)
	}
	return text
}

func statusText(o *score.Outcome) string {
	if o.Status == score.Missed {
		return "MISSED"
	}
	return string(o.Status)
}

// detailText is the observed values followed by the reason, if any.
func detailText(o *score.Outcome) string {
	text := observedText(o)
	if o.Reason != "" {
		if text != "" {
			text += "; "
		}
		text += o.Reason
	}
	return text
}

// ExpectCounts returns how many outcomes were met, missed and skipped.
func ExpectCounts(outs []score.Outcome) (met, missed, skipped int) {
	for i := range outs {
		switch outs[i].Status {
		case score.Met:
			met++
		case score.Missed:
			missed++
		case score.Skipped:
			skipped++
		}
	}
	return met, missed, skipped
}

func expectHeadline(outs []score.Outcome) string {
	met, missed, skipped := ExpectCounts(outs)
	s := fmt.Sprintf("%d met, %d missed", met, missed)
	if skipped > 0 {
		s += fmt.Sprintf(", %d skipped", skipped)
	}
	return s
}

// markdownVerdicts writes the headline's verdict on the expectations: the count met and
// missed, then one line per check (nothing without outcomes).
func markdownVerdicts(w io.Writer, outs []score.Outcome) {
	if len(outs) == 0 {
		return
	}
	fmt.Fprintf(w, "**Expectations: %s.**\n\n", expectHeadline(outs))
	for i := range outs {
		o := &outs[i]
		line := statusText(o) + ": " + o.Check
		if d := detailText(o); d != "" {
			line += " — " + d
		}
		if o.Status == score.Missed {
			line = "**" + line + "**"
		}
		fmt.Fprintf(w, "- %s\n", cell(line))
	}
	fmt.Fprintln(w)
}

// markdownExpect writes the report's expectations section (nothing without outcomes).
func markdownExpect(w io.Writer, outs []score.Outcome) {
	if len(outs) == 0 {
		return
	}
	fmt.Fprintf(w, "## Expectations\n\n%s.\n\n", expectHeadline(outs))
	rows := make([][]string, 0, len(outs))
	for i := range outs {
		o := &outs[i]
		status := statusText(o)
		if o.Status == score.Missed {
			status = "**" + status + "**"
		}
		rows = append(rows, []string{status, o.Check, detailText(o), o.Note})
	}
	table(w, []string{"Result", "Check", "Observed", "Why"}, rows)
}

// Expectations writes the terminal list of expectation outcomes (nothing without any).
func Expectations(w io.Writer, outs []score.Outcome) error {
	if len(outs) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nexpect: %s\n", expectHeadline(outs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := range outs {
		o := &outs[i]
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", statusText(o), o.Check, detailText(o))
	}
	return tw.Flush()
}

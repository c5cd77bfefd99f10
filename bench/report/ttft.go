package report

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/switchyard/switchyard/bench/score"
)

// ttftHeader are the columns of the TTFT-estimate accuracy table.
var ttftHeader = []string{"Algorithm", "Observed Attempts", "P50 Relative Error", "P90 Relative Error", "P50 Abs Error", "P90 Abs Error", "Later Than Estimated"}

func ttftRow(s *score.Summary) []string {
	e := s.TTFTEstimate
	return []string{
		s.Algorithm, strconv.Itoa(e.Attempts), pct(e.P50Relative), pct(e.P90Relative), ms(e.P50), ms(e.P90), pct(e.Exceeded),
	}
}

// hasTTFTEstimate reports whether any run has TTFT-estimate figures.
func hasTTFTEstimate(runs []Run) bool {
	for i := range runs {
		if runs[i].Summary.TTFTEstimate != nil {
			return true
		}
	}
	return false
}

// markdownTTFTEstimate writes the TTFT-estimate accuracy table (nothing when no run has
// figures).
func markdownTTFTEstimate(w io.Writer, runs []Run) {
	if !hasTTFTEstimate(runs) {
		return
	}
	fmt.Fprintf(w, "## TTFT estimate accuracy\n\n")
	fmt.Fprintf(w, "The gateway's TTFT estimate of each routed attempt against the time to first byte it observed "+
		"(streamed attempts that did not fail; from the gateway's ttft_estimate_error_* histograms, "+
		"quantiles interpolated within buckets). Relative error is |observed − estimate| / estimate.\n\n")
	rows := make([][]string, 0, len(runs))
	for i := range runs {
		if runs[i].Summary.TTFTEstimate != nil {
			rows = append(rows, ttftRow(&runs[i].Summary))
		}
	}
	table(w, ttftHeader, rows)
}

// tableTTFTEstimate writes the terminal lines of the TTFT-estimate accuracy (nothing when
// no run has figures).
func tableTTFTEstimate(w io.Writer, runs []Run) error {
	if !hasTTFTEstimate(runs) {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "algorithm\tttft estimate error p50\tp90\tabs p50\tabs p90\tlater than estimated\tattempts")
	for i := range runs {
		s := &runs[i].Summary
		if e := s.TTFTEstimate; e != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.Algorithm, pct(e.P50Relative), pct(e.P90Relative), ms(e.P50), ms(e.P90), pct(e.Exceeded), e.Attempts)
		}
	}
	return tw.Flush() //nolint:wrapcheck // the writer's own error
}

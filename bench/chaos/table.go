package chaos

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ProcRSS is one fleet process's resident memory at a scenario's start and end, in bytes
// (< 0: not running or unreadable).
type ProcRSS struct {
	Name          string
	Before, After int64
	// Restarted says After is of a new process started under the same name.
	Restarted bool
}

// ScenarioResult is what one scenario measured and how it compared with its budgets.
type ScenarioResult struct {
	Name string
	// Load is the statistics of the scenario's load of new requests.
	Load LoadStats
	// RSS is every fleet process's memory, in fleet order.
	RSS []ProcRSS
	// Measured are the scenario's own measurements, one line each.
	Measured []string
	Checks   []Check
	// Err is set when the scenario could not run (e.g. its fleet did not start); such a
	// scenario counts as missed.
	Err  error
	Took time.Duration
}

// Passed reports whether the scenario ran and met every budget.
func (r *ScenarioResult) Passed() bool {
	if r.Err != nil {
		return false
	}
	for _, c := range r.Checks {
		if !c.Pass {
			return false
		}
	}
	return true
}

// Missed returns the checks that missed their budget.
func (r *ScenarioResult) Missed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.Pass {
			out = append(out, c)
		}
	}
	return out
}

// verdict is the table's result cell.
func (r *ScenarioResult) verdict() string {
	switch {
	case r.Err != nil:
		return "ERROR"
	case r.Passed():
		return "ok"
	default:
		return "MISSED " + strconv.Itoa(len(r.Missed())) + "/" + strconv.Itoa(len(r.Checks))
	}
}

// rssCell renders a process's memory as "before→after" in MiB; "–" stands for unknown
// and "*" marks an after of a restarted process.
func rssCell(p ProcRSS) string {
	f := func(b int64) string {
		if b < 0 {
			return "–"
		}
		return strconv.FormatFloat(float64(b)/(1<<20), 'f', 0, 64)
	}
	s := f(p.Before) + "→" + f(p.After)
	if p.Restarted {
		s += "*"
	}
	return s
}

// procNames returns the process names of the first result that lists any, in order.
func procNames(rs []ScenarioResult) []string {
	for i := range rs {
		if len(rs[i].RSS) > 0 {
			names := make([]string, len(rs[i].RSS))
			for j, p := range rs[i].RSS {
				names[j] = p.Name
			}
			return names
		}
	}
	return nil
}

// rows renders the table's header and rows as cells.
func rows(rs []ScenarioResult) (header []string, body [][]string) {
	names := procNames(rs)
	header = make([]string, 0, 6+len(names))
	header = append(header, "scenario", "sent", "failed", "hung", "error window ms")
	for _, n := range names {
		header = append(header, n+" RSS MiB")
	}
	header = append(header, "result")
	for i := range rs {
		r := &rs[i]
		row := make([]string, 0, 6+len(names))
		row = append(row, r.Name, strconv.Itoa(r.Load.Sent), strconv.Itoa(r.Load.Failed), strconv.Itoa(r.Load.Hung), strconv.FormatInt(r.Load.Window.Milliseconds(), 10))
		for _, n := range names {
			cell := "–→–"
			for _, p := range r.RSS {
				if p.Name == n {
					cell = rssCell(p)
				}
			}
			row = append(row, cell)
		}
		body = append(body, append(row, r.verdict()))
	}
	return header, body
}

// details renders each scenario's measurements, checks and error, one line each.
func details(r *ScenarioResult) []string {
	var out []string
	if r.Err != nil {
		out = append(out, "ERROR: "+oneLine(r.Err.Error()))
	}
	out = append(out, r.Measured...)
	if len(r.Load.Examples) > 0 {
		out = append(out, "failures of new requests, e.g.: "+strings.Join(r.Load.Examples, "; "))
	}
	if r.Load.InFlightFailed > 0 {
		out = append(out, strconv.Itoa(r.Load.InFlightFailed)+" requests in flight at the fault failed (not counted as new)")
	}
	for _, c := range r.Checks {
		out = append(out, c.String())
	}
	out = append(out, "took "+r.Took.Round(100*time.Millisecond).String())
	return out
}

// WriteTable writes the results as an aligned text table, then each scenario's
// measurements and checks.
func WriteTable(w io.Writer, rs []ScenarioResult) error {
	header, body := rows(rs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range body {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err //nolint:wrapcheck // the writer's own error
	}
	fmt.Fprintln(w, "\nRSS: before→after in MiB; * after a restart of that process, – not running.")
	for i := range rs {
		fmt.Fprintf(w, "\n%s\n", rs[i].Name)
		for _, line := range details(&rs[i]) {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	_, err := fmt.Fprintf(w, "\n%s\n", Summary(rs))
	return err //nolint:wrapcheck // the writer's own error
}

// WriteMarkdown writes the results as a markdown document under title.
func WriteMarkdown(w io.Writer, title string, rs []ScenarioResult) error {
	header, body := rows(rs)
	fmt.Fprintf(w, "# %s\n\n", title)
	fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
		if i > 0 && i < 5 {
			sep[i] = "---:"
		}
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(sep, " | "))
	for _, row := range body {
		for i := range row {
			row[i] = strings.ReplaceAll(row[i], "|", `\|`)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintln(w, "\nRSS: before→after in MiB; * after a restart of that process, – not running.")
	for i := range rs {
		fmt.Fprintf(w, "\n## %s\n\n", rs[i].Name)
		for _, line := range details(&rs[i]) {
			fmt.Fprintf(w, "- %s\n", strings.ReplaceAll(line, "|", `\|`))
		}
	}
	_, err := fmt.Fprintf(w, "\n**%s**\n", Summary(rs))
	return err //nolint:wrapcheck // the writer's own error
}

// Summary is the one-line verdict over all results.
func Summary(rs []ScenarioResult) string {
	var missed []string
	for i := range rs {
		if !rs[i].Passed() {
			missed = append(missed, rs[i].Name)
		}
	}
	if len(missed) == 0 {
		return fmt.Sprintf("all %d scenarios within budget", len(rs))
	}
	return fmt.Sprintf("%d of %d scenarios missed a budget: %s", len(missed), len(rs), strings.Join(missed, ", "))
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

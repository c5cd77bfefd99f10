// Package report renders scored bench runs: report.md (the reference report's summary
// table, per-backend and per-cluster tables, failures and warnings), results.json, a
// compact terminal table and PNG charts. It is pure: everything is written to the
// io.Writer it is given.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard/switchyard/bench/score"
)

// Chart names one chart file of the report.
type Chart struct {
	File        string `json:"file"`
	Title       string `json:"title"`
	Description string `json:"description"`
}

// Meta describes the run as a whole.
type Meta struct {
	Scenario       string `json:"scenario"`
	Description    string `json:"description,omitempty"`
	ExpectedSignal string `json:"expected_signal,omitempty"`
	Seed           uint64 `json:"seed"`
	Requests       int    `json:"requests"`
	MaxConcurrency int    `json:"max_concurrency"`
	Backends       int    `json:"backends,omitempty"`
	Clusters       int    `json:"clusters,omitempty"`
	Gateways       int    `json:"gateways,omitempty"`
	// Replicas are the gateway replica counts of a replica comparison, one run of each
	// algorithm per count (Gateways is then 0).
	Replicas []int `json:"replicas,omitempty"`
	// ClientSpread is "affinity-key" when the driver sent each affinity key to one
	// gateway replica (empty: round-robin over the replicas).
	ClientSpread string   `json:"client_spread,omitempty"`
	TimeScale    float64  `json:"time_scale"`
	Target       string   `json:"target,omitempty"`
	Ignored      []string `json:"ignored_fields,omitempty"`
	Charts       []Chart  `json:"charts,omitempty"`
	// Profiles maps backend ids to the name of their scenario profile: the report and
	// the charts label backends "backend-0 (fast)".
	Profiles map[string]string `json:"backend_profiles,omitempty"`
}

// BackendLabel is a backend's id with its profile, "backend-0 (fast)" (the id alone when
// the profile has no name).
func (m *Meta) BackendLabel(id string) string {
	return backendLabel(m.Profiles, id)
}

func backendLabel(profiles map[string]string, id string) string {
	if p := profiles[id]; p != "" {
		return id + " (" + p + ")"
	}
	return id
}

// Run is one algorithm's scored run with its records.
type Run struct {
	Summary score.Summary  `json:"summary"`
	Records []score.Record `json:"records"`
	// Base and Gateways are set on the runs of a replica comparison (bench run
	// --replicas): the scenario's algorithm label the run is of (Summary.Algorithm is
	// "Base@Gateways") and the gateway replicas it ran with.
	Base     string `json:"base,omitempty"`
	Gateways int    `json:"gateways,omitempty"`
}

// Report is a whole bench report.
type Report struct {
	Meta
	Runs []Run `json:"runs"`
	// Expectations are the scenario's expect checks evaluated against Runs (none when the
	// scenario has no expect section).
	Expectations []score.Outcome `json:"expectations,omitempty"`
}

// JSON writes results.json.
func JSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func pct(v float64) string { return fmt.Sprintf("%.1f %%", 100*v) }

func optPct(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return pct(*v)
}

func score3(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", *v)
}

func num(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return fmt.Sprintf("%.2f", v)
}

func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// table writes a markdown table.
func table(w io.Writer, header []string, rows [][]string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(header)))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = cell(c)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
}

// summaryHeader are the reference bench report's summary columns, and ours after them.
var summaryHeader = []string{
	"Algorithm", "Admission Mode", "Success", "Successful RPS", "Output Goodput", "Avg TTFT", "P95 TTFT",
	"Avg TTLT", "P95 TTLT", "Max TTLT", "Total Length", "Cluster Equal Balance", "Cluster Input-Capacity Balance",
	"Pylon Equal Balance", "Pylon Capacity Balance", "Cache Hits", "Cache Hit Rate", "Input Reuse Rate",
	"Reused Input", "Prefilled Input", "Cache Movement", "Cache Evictions", "Evicted Tokens", "Failure Groups",
	"Fallback Route Choices", "KV-Free Fallback Choices", "Pylon Rejected", "Pylon Disabled",
	"Queue Mismatch Retries", "Retry Exhausted", "Engine Queued",
}

func summaryRow(s *score.Summary) []string {
	c := s.Counters
	return []string{
		s.Algorithm, s.AdmissionMode, fmt.Sprintf("%s (%d/%d)", pct(s.SuccessRate), s.Successes, s.Requests),
		fmt.Sprintf("%.2f", s.SuccessfulRPS), fmt.Sprintf("%.1f tok/s", s.OutputGoodput),
		ms(s.TTFT.Avg), ms(s.TTFT.P95), ms(s.TTLT.Avg), ms(s.TTLT.P95), ms(s.TTLT.Max), ms(s.Length),
		score3(s.ClusterEqualBalance), score3(s.ClusterInputCapacityBalance), score3(s.PylonEqualBalance), score3(s.PylonCapacityBalance),
		fmt.Sprintf("%d/%d", s.Cache.Hits, s.Cache.Reported), optPct(s.Cache.HitRate), optPct(s.Cache.InputReuseRate),
		strconv.FormatUint(s.Cache.ReusedInput, 10), strconv.FormatUint(s.Cache.UncachedInput, 10), optPct(s.Stickiness.MovementRate),
		strconv.FormatUint(s.Cache.Evictions, 10), strconv.FormatUint(s.Cache.EvictedTokens, 10), strconv.Itoa(len(s.Failures)),
		num(c.FallbackChoices), num(c.KVFreeFallback), num(c.AdmissionDecisions["rejected"]), num(c.AdmissionDecisions["disabled"]),
		num(c.QueueMismatchRetries), num(c.RetryExhaustedTotal), strconv.Itoa(s.EngineQueued),
	}
}

// headlineHeader are the columns of the headline table: what most readers compare first.
var headlineHeader = []string{"Algorithm", "Success", "Req/s", "TTFT avg / p95 / p99", "Cache Hits", "Keys Moved", "Failures"}

func headlineRow(s *score.Summary) []string {
	hits := "n/a"
	if s.Cache.HitRate != nil {
		hits = fmt.Sprintf("%s (%d/%d)", pct(*s.Cache.HitRate), s.Cache.Hits, s.Cache.Reported)
	}
	moved := "n/a"
	if s.Stickiness.Keys > 0 {
		moved = fmt.Sprintf("%d/%d (%s)", s.Stickiness.Moved, s.Stickiness.Keys, optPct(s.Stickiness.MovementRate))
	}
	failures := strconv.Itoa(s.Requests - s.Successes)
	if n := len(s.Failures); n > 0 {
		failures += fmt.Sprintf(" (%d kinds)", n)
	}
	return []string{
		s.Algorithm, pct(s.SuccessRate), fmt.Sprintf("%.2f", s.SuccessfulRPS),
		fmt.Sprintf("%s / %s / %s", ms(s.TTFT.Avg), ms(s.TTFT.P95), ms(s.TTFT.P99)), hits, moved, failures,
	}
}

var shareHeader = []string{
	"", "Requests", "Success", "Request Share", "Input Share", "Output Share", "Capacity Share",
	"Avg TTLT", "P95 TTLT", "Cache Hit Rate", "Evictions",
}

// shareRows are the rows of the backends (profiles set: labelled with theirs, and a
// cluster column) or clusters (profiles nil) table.
func shareRows(shares []score.Share, profiles map[string]string, withCluster bool) [][]string {
	rows := make([][]string, 0, len(shares))
	for _, b := range shares {
		lead := []string{backendLabel(profiles, b.ID)}
		if withCluster {
			cluster := b.Cluster
			if cluster == "" {
				cluster = "—"
			}
			lead = append(lead, cluster)
		}
		rows = append(rows, append(lead,
			strconv.Itoa(b.Requests), strconv.Itoa(b.Successes), pct(b.RequestShare), pct(b.InputShare),
			pct(b.OutputShare), optPct(b.CapacityShare), ms(b.AvgTTLT), ms(b.P95TTLT), optPct(b.CacheHitRate),
			strconv.FormatUint(b.Evictions, 10),
		))
	}
	return rows
}

// Markdown writes report.md.
func Markdown(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "# Bench report: %s\n\n", r.Scenario)
	if r.Description != "" {
		fmt.Fprintf(w, "%s\n\n", r.Description)
	}
	fmt.Fprintf(w, "- Seed %d, %d requests, max concurrency %d", r.Seed, r.Requests, r.MaxConcurrency)
	if r.Backends > 0 {
		if len(r.Replicas) > 0 {
			fmt.Fprintf(w, ", %d backends in %d clusters behind %s gateway(s), one run per count", r.Backends, r.Clusters, joinInts(r.Replicas))
		} else {
			fmt.Fprintf(w, ", %d backends in %d clusters behind %d gateway(s)", r.Backends, r.Clusters, r.Gateways)
		}
		if r.ClientSpread != "" {
			fmt.Fprintf(w, " (clients spread over them by %s)", r.ClientSpread)
		}
	}
	fmt.Fprintf(w, ", time scale %g", r.TimeScale)
	if r.Target != "" {
		fmt.Fprintf(w, ", target %s", r.Target)
	}
	fmt.Fprintln(w, ".")
	if r.TimeScale != 1 {
		fmt.Fprintf(w, "- Engine delays and arrival offsets were multiplied by %g; latencies below are in that scaled time.\n", r.TimeScale)
	}
	if r.ExpectedSignal != "" {
		fmt.Fprintf(w, "- Expected signal: %s\n", r.ExpectedSignal)
	}
	for _, f := range r.Ignored {
		fmt.Fprintf(w, "- Ignored (no local meaning): %s\n", f)
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "## Summary\n\n")
	head := make([][]string, 0, len(r.Runs))
	rows := make([][]string, 0, len(r.Runs))
	for i := range r.Runs {
		head = append(head, headlineRow(&r.Runs[i].Summary))
		rows = append(rows, summaryRow(&r.Runs[i].Summary))
	}
	table(w, headlineHeader, head)
	markdownVerdicts(w, r.Expectations)
	fmt.Fprintf(w, "### All figures\n\n")
	table(w, summaryHeader, rows)
	markdownExpect(w, r.Expectations)
	markdownReplicas(w, r.Runs)
	markdownTTFTEstimate(w, r.Runs)

	if len(r.Charts) > 0 {
		fmt.Fprintf(w, "## Charts\n\n")
		for _, c := range r.Charts {
			fmt.Fprintf(w, "- [%s](%s): %s\n", c.Title, c.File, c.Description)
		}
		fmt.Fprintln(w)
	}

	for i := range r.Runs {
		s := &r.Runs[i].Summary
		fmt.Fprintf(w, "## %s\n\n", s.Algorithm)
		fmt.Fprintf(w, "TTFT p50/p95/p99 %s / %s / %s; TTLT p50/p95/p99 %s / %s / %s; cache keys %d (%d stayed on one backend, %d moved).\n\n",
			ms(s.TTFT.P50), ms(s.TTFT.P95), ms(s.TTFT.P99), ms(s.TTLT.P50), ms(s.TTLT.P95), ms(s.TTLT.P99),
			s.Stickiness.Keys, s.Stickiness.Stayed, s.Stickiness.Moved)
		if len(s.Backends) > 0 {
			fmt.Fprintf(w, "### Backends\n\n")
			table(w, append([]string{"Backend", "Cluster"}, shareHeader[1:]...), shareRows(s.Backends, r.Profiles, true))
			fmt.Fprintf(w, "### Clusters\n\n")
			table(w, append([]string{"Cluster"}, shareHeader[1:]...), shareRows(s.Clusters, nil, false))
		}
		if len(s.Failures) > 0 {
			fmt.Fprintf(w, "### Failures\n\n")
			frows := make([][]string, 0, len(s.Failures))
			for _, f := range s.Failures {
				frows = append(frows, []string{strconv.Itoa(f.Status), backendLabel(r.Profiles, f.Backend), f.Error, strconv.Itoa(f.Count)})
			}
			table(w, []string{"Status", "Backend", "Error", "Count"}, frows)
		}
		if c := s.Counters; len(c.Retries) > 0 || len(c.RetryExhausted) > 0 || len(c.AdmissionDecisions) > 0 {
			fmt.Fprintf(w, "### Counters (Prometheus deltas)\n\n")
			crows := counterRows("gateway retries", c.Retries)
			crows = append(crows, counterRows("gateway retries exhausted", c.RetryExhausted)...)
			crows = append(crows, counterRows("pylon admission decisions", c.AdmissionDecisions)...)
			table(w, []string{"Counter", "Label", "Count"}, crows)
		}
		for _, warn := range s.Warnings {
			fmt.Fprintf(w, "> Warning: %s\n\n", warn)
		}
	}
	return nil
}

func counterRows(name string, m map[string]float64) [][]string {
	keys := slices.Sorted(maps.Keys(m))
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, []string{name, k, num(m[k])})
	}
	return rows
}

// Table writes the compact terminal summary.
func Table(w io.Writer, runs []Run) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "algorithm\tsuccess\trps\tgoodput\tavg ttft\tp95 ttft\tp95 ttlt\tcache hit\tinput reuse\tkey movement\tpylon cap balance\tcluster cap balance\tfallbacks\tfailures")
	for i := range runs {
		s := &runs[i].Summary
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.1f tok/s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n",
			s.Algorithm, pct(s.SuccessRate), s.SuccessfulRPS, s.OutputGoodput, ms(s.TTFT.Avg), ms(s.TTFT.P95), ms(s.TTLT.P95),
			optPct(s.Cache.HitRate), optPct(s.Cache.InputReuseRate), optPct(s.Stickiness.MovementRate),
			score3(s.PylonCapacityBalance), score3(s.ClusterInputCapacityBalance), num(s.Counters.FallbackChoices), s.Requests-s.Successes)
	}
	if err := tw.Flush(); err != nil {
		return err //nolint:wrapcheck // the writer's own error
	}
	return tableTTFTEstimate(w, runs)
}

// joinInts is "1, 2, 4".
func joinInts(v []int) string {
	parts := make([]string, 0, len(v))
	for _, n := range v {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ", ")
}

// markdownReplicas writes the replica comparison: for each algorithm, its runs with each
// gateway replica count against its first run (the first count), nothing when the runs
// are not a replica comparison.
func markdownReplicas(w io.Writer, runs []Run) {
	first := map[string]*score.Summary{}
	var rows [][]string
	for i := range runs {
		r := &runs[i]
		if r.Base == "" {
			continue
		}
		s := &r.Summary
		base, ok := first[r.Base]
		if !ok {
			first[r.Base], base = s, s
		}
		rows = append(rows, []string{
			r.Base, strconv.Itoa(r.Gateways), ms(s.TTFT.P95), ratio(s.TTFT.P95, base.TTFT.P95),
			optPct(s.Cache.HitRate), points(s.Cache.HitRate, base.Cache.HitRate), strconv.Itoa(s.EngineQueued),
			num(s.Counters.AdmissionDecisions["rejected"]), fmt.Sprintf("%d/%d", s.Successes, s.Requests),
		})
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## Gateway replicas\n\n")
	fmt.Fprintf(w, "Each algorithm ran once per replica count, the counts one after another; each run is compared with the algorithm's run with the first count.\n\n")
	table(w, []string{"Algorithm", "Gateways", "P95 TTFT", "vs first", "Cache Hit Rate", "vs first", "Engine Queued", "Pylon Rejected", "Success"}, rows)
}

// ratio is v/base as "1.03×" ("n/a" without a base).
func ratio(v, base time.Duration) string {
	if base <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", float64(v)/float64(base))
}

// points is the difference v − base in percentage points, "+0.4 pt" ("n/a" when either
// is unknown).
func points(v, base *float64) string {
	if v == nil || base == nil {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f pt", 100*(*v-*base))
}

package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestLedgerBalancesEveryRequestOnce(t *testing.T) {
	l := NewLedger()
	a, b, c := l.Begin(at(0)), l.Begin(at(1)), l.Begin(at(2))
	l.Finish(a, Result{Kind: KindOK})
	l.Finish(b, Result{Kind: KindStatus, Status: 503})
	got := l.Accounting()
	want := Accounting{Sent: 3, ExactlyOne: 2, Lost: 1}
	if got != want {
		t.Fatalf("with one request open: %+v, want %+v", got, want)
	}
	if got.Balanced() {
		t.Fatal("a ledger with a request never finished is balanced")
	}
	l.Finish(c, Result{Kind: KindTransport})
	if got := l.Accounting(); !got.Balanced() || got.ExactlyOne != 3 {
		t.Fatalf("every request finished once: %+v, want balanced with 3", got)
	}
	if n := len(l.Results()); n != 3 {
		t.Fatalf("results: %d, want 3", n)
	}
}

func TestLedgerCountsDuplicatesUnknownUnansweredAndTrailing(t *testing.T) {
	l := NewLedger()
	a, b, c, d := l.Begin(at(0)), l.Begin(at(0)), l.Begin(at(0)), l.Begin(at(0))
	l.Finish(a, Result{Kind: KindOK})
	l.Finish(a, Result{Kind: KindOK}) // the same request twice
	l.Finish(a, Result{Kind: KindOK}) // and a third time: still one duplicated request
	l.Finish(99, Result{Kind: KindOK})
	l.Finish(b, Result{Kind: KindHung})
	l.Finish(c, Result{Kind: KindOK, Stream: true, Trailing: true})
	l.Finish(d, Result{Kind: KindStreamError})
	got := l.Accounting()
	want := Accounting{Sent: 4, ExactlyOne: 1, Duplicates: 2, Unanswered: 1, Unknown: 1}
	if got != want {
		t.Fatalf("accounting %+v, want %+v", got, want)
	}
	if got.Balanced() {
		t.Fatal("balanced despite duplicates, an unanswered request and an unknown outcome")
	}
	if n := len(l.Results()); n != 4 {
		t.Fatalf("recorded %d results, want the 4 first outcomes", n)
	}
	if s := got.String(); !strings.Contains(s, "1 of 4") || !strings.Contains(s, "duplicated 2") || !strings.Contains(s, "unanswered 1") {
		t.Fatalf("rendering %q misses a count", s)
	}
}

func TestLedgerConcurrentUse(t *testing.T) {
	l := NewLedger()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				id := l.Begin(time.Now())
				l.Finish(id, Result{Kind: KindOK})
			}
		})
	}
	wg.Wait()
	if got := l.Accounting(); !got.Balanced() || got.Sent != 4000 {
		t.Fatalf("accounting %+v, want 4000 balanced", got)
	}
}

func TestSummarizeLeavesOutRequestsInFlightAtTheFault(t *testing.T) {
	fault := at(1000)
	results := []Result{
		{Start: at(0), End: at(50), Kind: KindOK},
		{Start: at(900), End: at(1100), Kind: KindTransport},            // in flight at the fault
		{Start: at(950), End: at(6000), Kind: KindHung},                 // in flight too, even hung
		{Start: at(1200), End: at(1300), Kind: KindStatus, Status: 503}, // new
		{Start: at(1400), End: at(1500), Kind: KindOK},
		{Start: at(1600), End: at(2300), Kind: KindStatus, Status: 503}, // new, same description
		{Start: at(2000), End: at(7000), Kind: KindHung, Err: "deadline"},
		{Start: at(2100), End: at(2200), Kind: KindAborted},
	}
	s := Summarize(results, fault)
	if s.Sent != 8 || s.Failed != 2 || s.Hung != 1 || s.InFlightFailed != 2 {
		t.Fatalf("sent %d failed %d hung %d in flight %d, want 8 2 1 2", s.Sent, s.Failed, s.Hung, s.InFlightFailed)
	}
	if s.Window != 5700*time.Millisecond {
		t.Fatalf("window %v, want 5.7s (1300 ms to 7000 ms)", s.Window)
	}
	if want := []string{"status 503", "hung: deadline"}; strings.Join(s.Examples, "|") != strings.Join(want, "|") {
		t.Fatalf("examples %q, want %q", s.Examples, want)
	}
	if got := s.FailuresByKind(); got != "status 2, hung 1" {
		t.Fatalf("failures by kind %q", got)
	}
	if s.ByKind[KindTransport] != 1 || s.ByKind[KindAborted] != 1 {
		t.Fatalf("by kind %v: every outcome counts there", s.ByKind)
	}
}

func TestSummarizeWithoutFaultOrFailures(t *testing.T) {
	s := Summarize([]Result{{Start: at(0), End: at(10), Kind: KindOK}}, time.Time{})
	if s.Failed != 0 || s.Hung != 0 || s.Window != 0 || !s.FirstFailure.IsZero() {
		t.Fatalf("a clean load: %+v", s)
	}
	one := Summarize([]Result{{Start: at(0), End: at(10), Kind: KindTransport}}, time.Time{})
	if one.Failed != 1 || one.Window != 0 {
		t.Fatalf("one failure, no fault: failed %d window %v, want 1 and 0", one.Failed, one.Window)
	}
}

func TestLoadChecks(t *testing.T) {
	clean := LoadStats{Sent: 10}
	if c := FailureCheck(clean, 0); !c.Pass {
		t.Fatalf("no failure: %v", c)
	}
	hung := LoadStats{Sent: 10, Hung: 1, NewFailures: map[Kind]int{KindHung: 1}}
	if c := FailureCheck(hung, 0); c.Pass || !strings.Contains(c.Got, "hung 1") {
		t.Fatalf("a hung request is a failure: %v", c)
	}
	if c := WindowCheck(LoadStats{Window: time.Second}, time.Second); !c.Pass {
		t.Fatalf("a window equal to the budget passes: %v", c)
	}
	if c := WindowCheck(LoadStats{Window: time.Second + time.Millisecond}, time.Second); c.Pass {
		t.Fatalf("a window over the budget passes: %v", c)
	}
}

func TestAnswersCheckAndTally(t *testing.T) {
	if c := AnswersCheck("x", []string{"413", "413"}, []string{"413"}); !c.Pass || c.Got != "413×2" {
		t.Fatalf("all 413: %v", c)
	}
	c := AnswersCheck("x", []string{"413", "reset", "413", "200", "reset", "reset"}, []string{"413"})
	if c.Pass {
		t.Fatalf("resets and a 200 pass: %v", c)
	}
	if c.Got != "reset×3, 413×2, 200×1" {
		t.Fatalf("tally %q: most frequent first, ties by name", c.Got)
	}
	if c := AnswersCheck("x", nil, []string{"413"}); c.Pass {
		t.Fatal("no answers at all pass")
	}
}

func TestMemoryChecks(t *testing.T) {
	if c := GrowthCheck("gateway", 20<<20, 276<<20, MaxRSSGrowth); !c.Pass {
		t.Fatalf("exactly 256 MiB of growth: %v", c)
	}
	if c := GrowthCheck("gateway", 20<<20, 277<<20, MaxRSSGrowth); c.Pass {
		t.Fatalf("257 MiB of growth: %v", c)
	}
	if c := GrowthCheck("gateway", -1, 30<<20, MaxRSSGrowth); c.Pass || !strings.Contains(c.Got, "unknown") {
		t.Fatalf("an unknown baseline passes: %v", c)
	}
	if c := SettleCheck("pylon-0", 100<<20, 120<<20, 0, 0.2, time.Second); !c.Pass {
		t.Fatalf("+20 %%: %v", c)
	}
	if c := SettleCheck("pylon-0", 100<<20, 121<<20, 0, 0.2, time.Second); c.Pass {
		t.Fatalf("+21 %%: %v", c)
	}
	if c := SettleCheck("pylon-0", 100<<20, 124<<20, 4<<20, 0.2, time.Second); !c.Pass || !strings.Contains(c.Limit, "twin's growth 4.0 MiB") {
		t.Fatalf("+20 %% and the twin's 4 MiB: %v", c)
	}
	if c := SettleCheck("pylon-0", 100<<20, 125<<20, 4<<20, 0.2, time.Second); c.Pass {
		t.Fatalf("past +20 %% and the twin's 4 MiB: %v", c)
	}
	if c := SettleCheck("pylon-0", 100<<20, 121<<20, -3<<20, 0.2, time.Second); c.Pass {
		t.Fatalf("a twin that shrank lowers no limit, raises none either: %v", c)
	}
	if c := SettleCheck("pylon-0", 100<<20, -1, 0, 0.2, time.Second); c.Pass {
		t.Fatalf("a dead process passes: %v", c)
	}
}

func TestShareStreamsAndClosedChecks(t *testing.T) {
	if c := ShareCheck("s", 25, 100, 0.25); !c.Pass {
		t.Fatalf("25 %%: %v", c)
	}
	if c := ShareCheck("s", 24, 100, 0.25); c.Pass {
		t.Fatalf("24 %%: %v", c)
	}
	if c := ShareCheck("s", 0, 0, 0.25); c.Pass {
		t.Fatalf("no requests: %v", c)
	}
	good := []StreamEnd{{Kind: KindStreamError, After: 10 * time.Millisecond}, {Kind: KindStreamError, After: time.Second}}
	if c := StreamEndsCheck(good, time.Second); !c.Pass {
		t.Fatalf("error events within the budget: %v", c)
	}
	for _, bad := range [][]StreamEnd{
		nil,
		{{Kind: KindStreamError, After: time.Millisecond}, {Kind: KindTruncated, After: time.Millisecond}},
		{{Kind: KindStreamError, After: 1001 * time.Millisecond}},
		{{Kind: KindHung, After: 3 * time.Second}},
		{{Kind: KindOK, After: time.Millisecond}},
	} {
		if c := StreamEndsCheck(bad, time.Second); c.Pass {
			t.Fatalf("%+v passes: %v", bad, c)
		}
	}
	if c := ClosedCheck(1000, 1000, 4*time.Second, 5*time.Second); !c.Pass {
		t.Fatalf("all closed in time: %v", c)
	}
	if c := ClosedCheck(999, 1000, time.Second, 5*time.Second); c.Pass {
		t.Fatalf("one left open: %v", c)
	}
	if c := ClosedCheck(1000, 1000, 6*time.Second, 5*time.Second); c.Pass {
		t.Fatalf("closed late: %v", c)
	}
	if c := ClosedCheck(0, 0, 0, time.Second); c.Pass {
		t.Fatalf("nothing opened: %v", c)
	}
}

func TestCountChecks(t *testing.T) {
	if c := EqualCheck("499", 20, 20); !c.Pass {
		t.Fatal(c)
	}
	if c := EqualCheck("499", 0, 20); c.Pass {
		t.Fatal(c)
	}
	if c := MaxCheck("failed", 1, 0); c.Pass {
		t.Fatal(c)
	}
	if c := BalancedCheck(Accounting{Sent: 3, ExactlyOne: 3}); !c.Pass {
		t.Fatal(c)
	}
	if c := BalancedCheck(Accounting{Sent: 3, ExactlyOne: 2, Lost: 1}); c.Pass {
		t.Fatal(c)
	}
}

func TestSoakChecks(t *testing.T) {
	if c := HeapGrowthCheck("gateway", 100, 110, 0.10); !c.Pass {
		t.Fatalf("+10 %%: %v", c)
	}
	if c := HeapGrowthCheck("gateway", 100, 111, 0.10); c.Pass {
		t.Fatalf("+11 %%: %v", c)
	}
	if c := HeapGrowthCheck("gateway", -1, -1, 0.10); c.Pass {
		t.Fatalf("no samples: %v", c)
	}
	if c := GoroutineCheck("pylon-0", 20, 30, 10, 0.1); !c.Pass {
		t.Fatalf("baseline + slack: %v", c)
	}
	if c := GoroutineCheck("pylon-0", 20, 31, 10, 0.1); c.Pass {
		t.Fatalf("over baseline + slack: %v", c)
	}
	if c := GoroutineCheck("gateway", 200, 220, 10, 0.1); !c.Pass {
		t.Fatalf("the fraction wins over the slack on a large baseline: %v", c)
	}
	if c := GoroutineCheck("gateway", 20, -1, 10, 0.1); c.Pass {
		t.Fatalf("unknown end: %v", c)
	}

	sample := func(at time.Duration, heap int64) SoakSample {
		return SoakSample{At: at, Procs: []ProcSample{{Name: GatewayName, Heap: heap}}}
	}
	rep := &SoakReport{
		Accounting: Accounting{Sent: 5, ExactlyOne: 5},
		// The warm-up sample (10 s) is left out: growth is 100 → 109, not 50 → 109.
		Samples:  []SoakSample{sample(10*time.Second, 50), sample(60*time.Second, 100), sample(90*time.Second, 130), sample(120*time.Second, 109)},
		Baseline: map[string]int{GatewayName: 20, PylonName(0): 18, PylonName(1): 18},
		Final:    map[string]int{GatewayName: 25, PylonName(0): 18, PylonName(1): 40},
	}
	rep.Checks = soakChecks(rep, time.Minute)
	var missed []string
	for _, c := range rep.Checks {
		if !c.Pass {
			missed = append(missed, c.Budget)
		}
	}
	if strings.Join(missed, "|") != "pylon-1 goroutines after the load stopped" {
		t.Fatalf("missed %q, want only pylon-1's goroutines", missed)
	}
	if rep.Passed() {
		t.Fatal("a report with a missed check passed")
	}
	var b bytes.Buffer
	if err := WriteSoak(&b, rep, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Samples", "## Budgets", "MISSED: pylon-1 goroutines", "soak missed a budget"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("soak markdown lacks %q:\n%s", want, b.String())
		}
	}
}

func sampleResults() []ScenarioResult {
	return []ScenarioResult{
		{
			Name: "pylon-kill", Load: LoadStats{Sent: 500, Failed: 3, Window: 1234 * time.Millisecond, Examples: []string{"status 503"}},
			RSS: []ProcRSS{
				{Name: GatewayName, Before: 20 << 20, After: 25 << 20},
				{Name: PylonName(0), Before: 21 << 20, After: -1},
				{Name: PylonName(1), Before: 22 << 20, After: 30 << 20, Restarted: true},
			},
			Measured: []string{"kill -9 pylon-0 | under load"},
			Checks:   []Check{{Budget: "failed", Got: "3", Limit: "≤ 0"}, {Budget: "window", Got: "1234 ms", Limit: "≤ 1000 ms", Pass: true}},
		},
		{Name: "idle-bursts", Load: LoadStats{Sent: 1000}, Checks: []Check{{Budget: "failed", Got: "0", Limit: "≤ 0", Pass: true}}},
		{Name: "slowloris", Err: errors.New("fleet did not start:\nport taken")},
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	rs := sampleResults()
	if err := WriteTable(&b, rs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	for _, want := range []string{"scenario", "sent", "failed", "hung", "error window ms", "gateway RSS MiB", "pylon-0 RSS MiB", "result"} {
		if !strings.Contains(lines[0], want) {
			t.Fatalf("header %q lacks %q", lines[0], want)
		}
	}
	row := strings.Fields(lines[1])
	if want := []string{"pylon-kill", "500", "3", "0", "1234", "20→25", "21→–", "22→30*", "MISSED", "1/2"}; strings.Join(row, " ") != strings.Join(want, " ") {
		t.Fatalf("row %q, want %q", row, want)
	}
	if !strings.HasSuffix(lines[2], "ok") || !strings.HasSuffix(lines[3], "ERROR") {
		t.Fatalf("verdicts: %q, %q", lines[2], lines[3])
	}
	for _, want := range []string{
		"MISSED: failed: 3 (budget ≤ 0)", "ok: window: 1234 ms", "failures of new requests, e.g.: status 503", "ERROR: fleet did not start: port taken",
		"2 of 3 scenarios missed a budget: pylon-kill, slowloris",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, "bench chaos", sampleResults()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	var table []string
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "|") {
			table = append(table, strings.TrimSpace(line))
		}
	}
	if len(table) != 5 { // header, separator, three rows
		t.Fatalf("%d table lines, want 5:\n%s", len(table), out)
	}
	cols := strings.Count(strings.ReplaceAll(table[0], `\|`, ""), "|")
	for _, l := range table {
		if n := strings.Count(strings.ReplaceAll(l, `\|`, ""), "|"); n != cols {
			t.Fatalf("line %q has %d separators, the header %d", l, n, cols)
		}
	}
	if !strings.HasPrefix(out, "# bench chaos\n") || !strings.Contains(out, "## pylon-kill") || !strings.Contains(out, `kill -9 pylon-0 \| under load`) {
		t.Fatalf("markdown:\n%s", out)
	}
	if !strings.Contains(out, "**2 of 3 scenarios missed a budget") {
		t.Fatalf("no summary:\n%s", out)
	}
}

func TestSummaryAllPassed(t *testing.T) {
	rs := sampleResults()[1:2]
	if got := Summary(rs); got != "all 1 scenarios within budget" {
		t.Fatal(got)
	}
	if !rs[0].Passed() {
		t.Fatal("a scenario with passing checks did not pass")
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP x y
# TYPE switchyard_requests_total counter
switchyard_requests_total{routing_key="",model="m",inference_server_id="b0",status="200"} 17
switchyard_requests_total{routing_key="",model="m",inference_server_id="",status="499"} 3
switchyard_requests_total{routing_key="k",model="a \"quoted\", name",inference_server_id="b1",status="499"} 2
go_goroutines 42
go_memstats_heap_inuse_bytes 1.2345e+07
broken{label="no end 5
`
	ss := ParseMetrics(text)
	if len(ss) != 5 {
		t.Fatalf("parsed %d series, want 5: %+v", len(ss), ss)
	}
	if v, ok := Sum(ss, "switchyard_requests_total", map[string]string{"status": "499"}); !ok || v != 5 {
		t.Fatalf("499s: %v %v, want 5", v, ok)
	}
	if v, _ := Sum(ss, "switchyard_requests_total", nil); v != 22 {
		t.Fatalf("all requests: %v, want 22", v)
	}
	if v, ok := Sum(ss, "switchyard_requests_total", map[string]string{"model": `a "quoted", name`}); !ok || v != 2 {
		t.Fatalf("escaped label: %v %v", v, ok)
	}
	if v, ok := Sum(ss, "go_memstats_heap_inuse_bytes", nil); !ok || v != 12345000 {
		t.Fatalf("heap: %v %v", v, ok)
	}
	if _, ok := Sum(ss, "absent", nil); ok {
		t.Fatal("an absent series was found")
	}
}

func TestParseVMRSS(t *testing.T) {
	v, err := ParseVMRSS("Name:\tgateway\nVmPeak:\t  900 kB\nVmRSS:\t   23456 kB\nThreads: 9\n")
	if err != nil || v != 23456<<10 {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := ParseVMRSS("Name:\tzombie\nState:\tZ (zombie)\n"); err == nil {
		t.Fatal("a status without VmRSS parsed")
	}
}

func TestParseFeatures(t *testing.T) {
	none := ParseFeatures("      --drain-timeout=30s   On SIGTERM ...\n --enable-pprof", "--log-level")
	if none.ReadHeaderTimeoutFlag != "" || none.ReadHeaderTimeoutArg(2*time.Second) != "" || !none.GatewayPprof || none.EngineTestControl ||
		none.GatewayWriteTimeout {
		t.Fatalf("features %+v", none)
	}
	d := ParseFeatures("      --read-header-timeout=10s   Longest wait for headers\n      --write-timeout=30s   Longest a response write", "--enable-test-control")
	if got := d.ReadHeaderTimeoutArg(2 * time.Second); got != "--read-header-timeout=2s" || !d.EngineTestControl || !d.GatewayWriteTimeout {
		t.Fatalf("duration flag: %q %+v", got, d)
	}
	m := ParseFeatures("      --read-header-timeout-ms=10000", "")
	if got := m.ReadHeaderTimeoutArg(2 * time.Second); got != "--read-header-timeout-ms=2000" {
		t.Fatalf("ms flag: %q", got)
	}
}

func TestReadSSE(t *testing.T) {
	ev := func(s string) string { return "data: " + s + "\n\n" }
	chunk := ev(`{"choices":[{"delta":{"content":"x"}}]}`)
	cases := []struct {
		name     string
		body     string
		done     bool
		errText  string
		events   int
		trailing bool
	}{
		{name: "complete", body: chunk + chunk + ev("[DONE]"), done: true, events: 2},
		{name: "truncated", body: chunk + chunk, events: 2},
		{name: "error member", body: chunk + ev(`{"error":{"message":"upstream died","type":"server_error"}}`), errText: "upstream died", events: 1},
		{name: "error event", body: chunk + "event: error\ndata: backend gone\n\n", errText: "backend gone", events: 1},
		{name: "error null is not an error", body: ev(`{"error":null,"choices":[]}`) + ev("[DONE]"), done: true, events: 1},
		{name: "trailing after done", body: chunk + ev("[DONE]") + chunk, done: true, events: 1, trailing: true},
		{name: "crlf", body: strings.ReplaceAll(chunk+ev("[DONE]"), "\n", "\r\n"), done: true, events: 1},
		{name: "long line", body: "data: " + strings.Repeat("y", 200<<10) + "\n\n" + ev("[DONE]"), done: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := 0
			end, err := ReadSSE(iotest.OneByteReader(strings.NewReader(c.body)), func(int) { n++ })
			if err != nil {
				t.Fatal(err)
			}
			if end.Done != c.done || end.Error != c.errText || end.Events != c.events || end.Trailing != c.trailing || n != c.events {
				t.Fatalf("got %+v (callbacks %d), want done %v error %q events %d trailing %v", end, n, c.done, c.errText, c.events, c.trailing)
			}
		})
	}
	_, err := ReadSSE(io.MultiReader(strings.NewReader(chunk), iotest.ErrReader(errors.New("connection reset"))), nil)
	if err == nil || !strings.Contains(err.Error(), "reset") {
		t.Fatalf("a read error: %v", err)
	}
}

func TestMixedRequestsAreValidAndVaried(t *testing.T) {
	streams, sizes := 0, map[int]bool{}
	for n := range uint64(20) {
		r := MixedRequest(n)
		var body struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(r.Body(), &body); err != nil {
			t.Fatalf("request %d: %v", n, err)
		}
		if body.Model != Model || body.Stream != r.Stream || len(body.Messages) != 1 || len(body.Messages[0].Content) < r.PromptBytes {
			t.Fatalf("request %d: %+v from %+v", n, body, r)
		}
		if r.Stream {
			streams++
		}
		sizes[r.PromptBytes] = true
	}
	if streams != 10 || len(sizes) != len(promptSizes) {
		t.Fatalf("%d streamed of 20, %d prompt sizes", streams, len(sizes))
	}
}

func TestSelectScenarios(t *testing.T) {
	all, err := selectScenarios(nil, false)
	if err != nil || len(all) != len(suite) {
		t.Fatalf("all: %d %v", len(all), err)
	}
	short, _ := selectScenarios(nil, true)
	for _, s := range short {
		if !s.short {
			t.Fatalf("%s is not a short scenario", s.name)
		}
	}
	if len(short) == 0 || len(short) == len(suite) {
		t.Fatalf("short subset of %d", len(short))
	}
	only, err := selectScenarios([]string{"idle-bursts", "pylon-kill"}, true)
	if err != nil || len(only) != 2 || only[0].name != "pylon-kill" {
		t.Fatalf("only: %v %v (suite order expected)", only, err)
	}
	if _, err := selectScenarios([]string{"nope"}, false); err == nil || !strings.Contains(err.Error(), "pylon-kill") {
		t.Fatalf("unknown name: %v", err)
	}
}

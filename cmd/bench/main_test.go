package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/internal/cmdline"
	"github.com/switchyard/switchyard/internal/cmdline/cmdlinetest"
	"github.com/switchyard/switchyard/internal/overhead"
	"github.com/switchyard/switchyard/internal/overhead/overheadtest"
)

func TestListScenarios(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := listScenarios(&b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != 20 || !strings.Contains(b.String(), "demo ") || !strings.Contains(b.String(), "coding-sessions ") {
		t.Errorf("%d lines:\n%s", n, b.String())
	}
}

func TestLoadScenarioErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nmodel: m\ncolour: blue\nrequest_count: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadScenario(bad)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `unknown field "colour"`) {
		t.Errorf("error %q", err)
	}
	if _, err := loadScenario("demo"); err != nil {
		t.Errorf("bundled demo: %v", err)
	}
	if _, err := loadScenario("no-such-scenario"); err == nil {
		t.Error("missing scenario accepted")
	}
}

// overheadRun returns n synthetic rounds (overheadtest.Synthetic): every path is the same
// baseline draw plus its hop's added latency (mean added[p], exponential noise).
func overheadRun(n int, added map[int]time.Duration) *overhead.Result {
	var a [overhead.NumPaths]time.Duration
	for p, d := range added {
		a[p] = d
	}
	return overheadtest.Synthetic(rand.New(rand.NewPCG(uint64(n), 9)), n, a)
}

// The report gives each ratio's interval and settles the budget from it: within, over, or
// not settled by the run (and, when the A/A control could not be settled either, that the
// run was too short); it flags an A/A control whose interval leaves out 1.00×.
func TestWriteOverheadSettlesTheBudgetFromIntervals(t *testing.T) {
	t.Parallel()
	us := time.Microsecond
	run := func(n int, gateway, control time.Duration) string {
		var b bytes.Buffer
		added := map[int]time.Duration{
			overhead.ProxyEngine: 60 * us, overhead.PylonEngine: 60 * us,
			overhead.ProxyPylon: 60 * us, overhead.GatewayPylon: gateway, overhead.ControlPylon: control,
		}
		if err := writeOverhead(&b, overheadRun(n, added)); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	cases := []struct {
		name     string
		n        int
		gateway  time.Duration
		control  time.Duration
		want     []string
		dontWant []string
	}{
		{"within", 4000, 60 * us, 60 * us, []string{"gateway → pylon: within the budget at p50 and p99", "95 % intervals p50, p99"}, []string{"warning"}},
		{"over", 4000, 120 * us, 60 * us, []string{"gateway → pylon: over the budget at p50 and p99"}, []string{"warning"}},
		{"not settled", 150, 70 * us, 60 * us, []string{"gateway → pylon: not settled at p99 by this run"}, nil},
		{"control settled", 4000, 70 * us, 60 * us, nil, []string{"reaches past it too"}},
		{"uneven control", 4000, 60 * us, 90 * us, []string{"warning: the A/A control's 99 % interval at p50 leaves out 1.00×", "in this run it measured +4"}, nil},
	}
	for _, c := range cases {
		out := run(c.n, c.gateway, c.control)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in\n%s", c.name, w, out)
			}
		}
		for _, w := range c.dontWant {
			if strings.Contains(out, w) {
				t.Errorf("%s: %q in\n%s", c.name, w, out)
			}
		}
	}
}

// A quantile the A/A control could not settle either gets the advice that the run was too
// short, not merely "run it again".
func TestSettleSaysWhenTheRunIsTooShortForIdenticalCode(t *testing.T) {
	t.Parallel()
	tight, wide := overhead.Interval{Lo: 0.95, Hi: 1.05}, overhead.Interval{Lo: 0.7, Hi: 1.5}
	cases := []struct {
		name           string
		in, control    [2]overhead.Interval
		want, dontWant string
	}{
		{"control wide at p99", [2]overhead.Interval{tight, wide}, [2]overhead.Interval{tight, wide}, "the A/A control's interval at p99 reaches past it too", ""},
		{"control settled", [2]overhead.Interval{tight, wide}, [2]overhead.Interval{tight, tight}, "not settled at p99 by this run", "reaches past it too"},
		{"control wide where the component settled", [2]overhead.Interval{tight, tight}, [2]overhead.Interval{wide, wide}, "within the budget", "reaches past it too"},
		{"over wins", [2]overhead.Interval{{Lo: 1.3, Hi: 1.4}, wide}, [2]overhead.Interval{tight, wide}, "over the budget at p50", "reaches past it too"},
	}
	for _, c := range cases {
		got := settle(c.in, c.control)
		if !strings.Contains(got, c.want) || (c.dontWant != "" && strings.Contains(got, c.dontWant)) {
			t.Errorf("%s: %q", c.name, got)
		}
	}
}

// --contend is bounded: each copy is a whole fleet of seven processes.
func TestOverheadValidatesContend(t *testing.T) {
	t.Parallel()
	for n, ok := range map[int]bool{-1: false, 0: true, maxContend: true, maxContend + 1: false} {
		err := (&overheadCmd{Requests: 1, Contend: n}).Validate()
		if (err == nil) != ok {
			t.Errorf("--contend %d: err %v", n, err)
		}
	}
}

// --replicas takes counts 1..maxReplicas, each once, and not with --grid.
func TestRunValidatesReplicas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		counts []int
		grid   []string
		ok     bool
	}{
		{nil, nil, true},
		{[]int{1, 2, 4}, nil, true},
		{[]int{maxReplicas}, nil, true},
		{[]int{0, 2}, nil, false},
		{[]int{maxReplicas + 1}, nil, false},
		{[]int{2, 2}, nil, false},
		{[]int{1, 2}, []string{"seed=a,b"}, false},
	} {
		err := (&runCmd{scenarioFlags: scenarioFlags{TimeScale: 1}, Replicas: tc.counts, Grid: tc.grid}).Validate()
		if (err == nil) != tc.ok {
			t.Errorf("--replicas %v (grid %v): err %v, want ok %v", tc.counts, tc.grid, err, tc.ok)
		}
	}
}

// Each bare proxy gets its own copy of the executable: the same bytes in a file of its
// own, so its machine code is not the measuring client's nor another proxy's.
func TestPrivateCopiesShareNoFileWithTheExecutable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	self := writeExecutable(t, dir, "#!/bin/sh\necho copy\n")
	paths, err := privateCopies(self, dir, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	selfInfo, _ := os.Stat(self)
	infos := make([]os.FileInfo, 0, len(paths))
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != "#!/bin/sh\necho copy\n" || fi.Mode().Perm()&0o100 == 0 {
			t.Errorf("%s: %q, mode %v: not an executable copy", p, b, fi.Mode())
		}
		if os.SameFile(fi, selfInfo) {
			t.Errorf("%s is the executable itself", p)
		}
		infos = append(infos, fi)
	}
	if len(infos) != 2 || os.SameFile(infos[0], infos[1]) {
		t.Error("the two copies are one file")
	}
	if _, err := privateCopies(filepath.Join(dir, "missing"), dir, "c"); err == nil {
		t.Error("copying a missing executable succeeded")
	}
}

// The copies go beside the executable, and are removed; an executable that cannot be read
// is run itself, with a warning, rather than failing the measurement.
func TestProxyExecutablesAreRemovedAndFallBackToTheExecutable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	self := writeExecutable(t, dir, "binary")
	paths, remove := proxyExecutables(self, "a", "b", "c")
	if len(paths) != 3 || filepath.Dir(filepath.Dir(paths[0])) != dir || paths[0] == paths[1] {
		t.Fatalf("copies %v, want three distinct ones in a directory beside %s", paths, self)
	}
	remove()
	if _, err := os.Stat(filepath.Dir(paths[0])); !os.IsNotExist(err) {
		t.Errorf("the copies' directory is still there: %v", err)
	}
	missing := filepath.Join(dir, "missing")
	paths, remove = proxyExecutables(missing, "a")
	defer remove()
	if len(paths) != 1 || paths[0] != missing {
		t.Errorf("without a readable executable the proxies run from %v, want %s itself", paths, missing)
	}
}

// Copies left behind by a bench that was killed are removed by the next one; those of a
// bench still running, and directories that name no process, are not.
func TestStaleCopiesAreSwept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := mk(copiesPrefix + strconv.Itoa(gone.Process.Pid) + "-123")
	live := mk(copiesPrefix + strconv.Itoa(os.Getpid()) + "-456")
	unnamed := mk(copiesPrefix + "789")
	other := mk("unrelated-" + strconv.Itoa(gone.Process.Pid) + "-1")
	sweepStaleCopies(dir)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the copies of a process that is gone are still there: %v", err)
	}
	for _, keep := range []string{live, unnamed, other} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}

// writeExecutable writes content as an executable file in dir and returns its path.
func writeExecutable(t *testing.T, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, "bench")
	if err := os.WriteFile(path, []byte(content), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCPUPerRequest(t *testing.T) {
	t.Parallel()
	specs := []fleet.Spec{{Name: "engine"}, {Name: "gateway"}, {Name: "pylon"}, {Name: "proxy-pylon"}}
	served := map[string]int{"engine": 7, "pylon": 5}
	ms := time.Millisecond
	before := []time.Duration{100 * ms, 0, 10 * ms, -1}
	after := []time.Duration{100*ms + 1400*ms, 260 * ms, 10*ms + 500*ms, 50 * ms}
	got := cpuPerRequest(specs, served, before, after, 1000)
	// engine 1.4 s over 7 000 requests, gateway 0.26 s over 1 000, pylon 0.5 s over 5 000;
	// the proxy's first reading failed.
	for _, want := range []string{"engine 200.0 µs (7 paths)", "gateway 260.0 µs,", "pylon 100.0 µs (5 paths)", "proxy-pylon n/a"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %q", want, got)
		}
	}
}

// bench run fails when an expect check is missed, unless --no-expect; met and skipped
// checks (and none at all) never fail it.
func TestExpectErrIsTheExitStatus(t *testing.T) {
	t.Parallel()
	met := score.Outcome{Status: score.Met}
	missed := score.Outcome{Status: score.Missed}
	skipped := score.Outcome{Status: score.Skipped}
	for _, c := range []struct {
		name    string
		outs    []score.Outcome
		enforce bool
		fails   bool
	}{
		{"no expect section", nil, true, false},
		{"all met", []score.Outcome{met, met}, true, false},
		{"met and skipped", []score.Outcome{met, skipped}, true, false},
		{"one missed", []score.Outcome{met, missed, skipped}, true, true},
		{"one missed, --no-expect", []score.Outcome{met, missed}, false, false},
	} {
		err := expectErr(c.outs, c.enforce)
		if (err != nil) != c.fails {
			t.Errorf("%s: error %v, want failure %v", c.name, err, c.fails)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "1 of 3 expect checks missed") {
			t.Errorf("%s: error %q", c.name, err)
		}
	}
	for args, want := range map[string]bool{"": true, "--no-expect": false, "--expect": true} {
		c, argv := parseRun(t, args)
		if c.Run.Expect != want {
			t.Errorf("%v: Expect %v, want %v", argv, c.Run.Expect, want)
		}
	}
}

// parseRun parses "run --scenario demo" and args (space-separated) as the command line,
// returning the flags and the argv it parsed.
func parseRun(t *testing.T, args string) (*cli, []string) {
	t.Helper()
	var c cli
	p, err := kong.New(&c, options(&c)...)
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"run", "--scenario", "demo"}, strings.Fields(args)...)
	if _, err := p.Parse(argv); err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	return &c, argv
}

// --slot-shares is unset by default (each algorithm decides), and --slot-shares or
// --no-slot-shares sets every algorithm's pylon_queue_admission.slot_shares.
func TestRunSlotSharesFlag(t *testing.T) {
	for args, want := range map[string]string{"": "unset", "--slot-shares": "true", "--no-slot-shares": "false"} {
		c, argv := parseRun(t, args)
		got := "unset"
		if c.Run.SlotShares != nil {
			got = strconv.FormatBool(*c.Run.SlotShares)
		}
		if got != want {
			t.Errorf("%v: slot shares %s, want %s", argv, got, want)
		}
	}
	s := &scenario.Scenario{Algorithms: []scenario.Algorithm{{Name: "a"}, {Name: "b", PylonQueueAdmission: &scenario.QueueAdmission{MinDeltaMs: new(float64)}}}}
	s.SetSlotShares(true)
	for _, a := range s.Algorithms {
		if !a.PylonQueueAdmission.Shares() {
			t.Errorf("%s: no slot shares after SetSlotShares(true)", a.Name)
		}
	}
	if md := s.Algorithms[1].PylonQueueAdmission.MinDeltaMs; md == nil || *md != 0 {
		t.Errorf("SetSlotShares changed min_delta_ms: %v", md)
	}
	if (&scenario.QueueAdmission{}).Shares() || (*scenario.QueueAdmission)(nil).Shares() {
		t.Error("slot shares by default")
	}
	// Not where the admission rule that enforces a share is off (the pylon would refuse
	// to start).
	off, on := false, true
	for _, q := range []scenario.QueueAdmission{{SlotShares: &on, Enabled: &off}, {SlotShares: &on, RequireFreeSlot: &off}} {
		if q.Shares() {
			t.Errorf("%+v: slot shares without the free-slot rule", q)
		}
	}
}

// The global flags work after the command too, and reach the runner; a config file may
// hold the selected command's flags; a misspelt key exits 2 before anything runs.
func TestGlobalFlagsConfigFileAndExitStatus(t *testing.T) {
	var c cli
	p, err := kong.New(&c, append(options(&c), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))...)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(good, []byte("ready_timeout: 1m\nalgorithms: [a, b]\nlog_format: json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse([]string{"run", "--scenario", "demo", "--config", good, "--log-level", "debug"}); err != nil {
		t.Fatal(err)
	}
	if c.Run.ReadyTimeout != time.Minute || strings.Join(c.Run.Algorithms, ",") != "a,b" || c.Common.LogFormat != "json" || c.Common.LogLevel != "debug" {
		t.Errorf("ready timeout %v, algorithms %v, log %s/%s", c.Run.ReadyTimeout, c.Run.Algorithms, c.Common.LogFormat, c.Common.LogLevel)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("ready_timeout: 1m\nbin_dri: bin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	var c2 cli
	exited := -1
	opts := append(options(&c2), kong.Exit(func(code int) { exited = code }), kong.Writers(&bytes.Buffer{}, &stderr))
	if code := cmdline.Run(&c2, []string{"run", "--scenario", "demo", "--config", bad}, opts...); code != 2 || exited != 2 {
		t.Errorf("exit status %d (kong %d), want 2", code, exited)
	}
	if !strings.Contains(stderr.String(), `unknown key "bin_dri" (did you mean "bin_dir"?)`) {
		t.Errorf("stderr does not name the key:\n%s", stderr.String())
	}
}

// The example in docs/configuration.md parses.
func TestDocExample(t *testing.T) {
	var c cli
	p, err := kong.New(&c, append(options(&c), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse([]string{"run", "--scenario", "demo", "--config", cmdlinetest.DocExample(t, "../../docs/configuration.md", "bench")}); err != nil {
		t.Fatal(err)
	}
	if c.Run.ReadyTimeout != time.Minute || c.Run.TimeScale != 0.5 || c.Common.LogLevel != "warn" {
		t.Errorf("ready timeout %v, time scale %v, log level %q", c.Run.ReadyTimeout, c.Run.TimeScale, c.Common.LogLevel)
	}
}

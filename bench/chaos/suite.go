package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
)

// Options configure a run of the fault suite.
type Options struct {
	Bin fleet.Binaries
	// Short runs the subset marked short with smaller counts (CI).
	Short bool
	// Only runs these scenarios (by name) instead of all.
	Only []string
	// LogDir keeps the children's logs, one folder per scenario; "" uses a temporary
	// folder removed at the end.
	LogDir string
	// Progress receives one line per step (nil: discarded).
	Progress io.Writer
}

// Report is a run's results.
type Report struct {
	Results  []ScenarioResult
	Features Features
	Short    bool
	// PIDs are the ids of every process the run started; all have exited when Run returns.
	PIDs []int
	Took time.Duration
}

// Passed reports whether every scenario ran and met its budgets.
func (r *Report) Passed() bool {
	for i := range r.Results {
		if !r.Results[i].Passed() {
			return false
		}
	}
	return len(r.Results) > 0
}

// sizes are the counts and durations of one run (full or short).
type sizes struct {
	workers      int           // load workers, each serial
	pause        time.Duration // pause of each worker between requests
	pre, post    time.Duration // load before and after a fault
	freeze       time.Duration // SIGSTOP length
	slowConns    int
	bodyBytes    int64
	bodies       int // concurrent oversized bodies per target
	settle       time.Duration
	junkRounds   int
	cancels      int
	dyingStreams int
	bursts       int
	burstSize    int
	burstGap     time.Duration
	idle         time.Duration // quiet time before the first burst
}

var (
	fullSizes = sizes{
		workers: 4, pause: 10 * time.Millisecond, pre: 2 * time.Second, post: 5 * time.Second, freeze: 8 * time.Second,
		slowConns: 1000, bodyBytes: 300 << 20, bodies: 8, settle: RSSSettleAfter, junkRounds: 10, cancels: 20, dyingStreams: 16,
		bursts: 25, burstSize: 40, burstGap: 250 * time.Millisecond, idle: 2 * time.Second,
	}
	shortSizes = sizes{
		workers: 2, pause: 10 * time.Millisecond, pre: time.Second, post: 3 * time.Second, freeze: 3 * time.Second,
		slowConns: 100, bodyBytes: 96 << 20, bodies: 2, settle: 5 * time.Second, junkRounds: 2, cancels: 5, dyingStreams: 6,
		bursts: 5, burstSize: 40, burstGap: 100 * time.Millisecond, idle: 500 * time.Millisecond,
	}
)

// scenarioTimeout bounds one scenario, its fleet's start and stop included.
const scenarioTimeout = 2 * time.Minute

// env is what the scenarios share.
type env struct {
	sz       sizes
	features Features
	progress io.Writer
}

// scenario is one entry of the suite.
type scenario struct {
	name  string
	about string
	short bool
	// gatewayArgs adds to the gateway's command line (nil: nothing).
	gatewayArgs func(e *env) []string
	run         func(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult
}

// ScenarioInfo names and describes a scenario.
type ScenarioInfo struct {
	Name, About string
	// Short says the scenario is part of --short.
	Short bool
}

// Scenarios lists the suite's scenarios in run order.
func Scenarios() []ScenarioInfo {
	out := make([]ScenarioInfo, 0, len(suite))
	for _, s := range suite {
		out = append(out, ScenarioInfo{Name: s.name, About: s.about, Short: s.short})
	}
	return out
}

// Run runs the suite. It returns an error only when it cannot start at all (missing
// binaries, an unknown scenario name); a scenario that fails to run is reported in its
// result. Every child process has exited when Run returns.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if err := o.Bin.Check(); err != nil {
		return nil, err //nolint:wrapcheck // names the binaries
	}
	selected, err := selectScenarios(o.Only, o.Short)
	if err != nil {
		return nil, err
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	logDir := o.LogDir
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "switchyard-chaos-"); err != nil {
			return nil, err //nolint:wrapcheck // names the folder
		}
		defer os.RemoveAll(logDir)
	}
	e := &env{sz: fullSizes, features: DetectFeatures(ctx, o.Bin), progress: progress}
	if o.Short {
		e.sz = shortSizes
	}
	rep := &Report{Features: e.features, Short: o.Short}
	for _, sc := range selected {
		if ctx.Err() != nil {
			break
		}
		res, pids := runScenario(ctx, e, sc, o.Bin, filepath.Join(logDir, sc.name))
		rep.Results = append(rep.Results, res)
		rep.PIDs = append(rep.PIDs, pids...)
	}
	rep.Took = time.Since(start)
	return rep, nil
}

func selectScenarios(only []string, short bool) ([]scenario, error) {
	var out []scenario
	for _, name := range only {
		if !slices.ContainsFunc(suite, func(s scenario) bool { return s.name == name }) {
			names := make([]string, 0, len(suite))
			for _, s := range suite {
				names = append(names, s.name)
			}
			return nil, fmt.Errorf("no scenario %q (scenarios: %s)", name, strings.Join(names, ", "))
		}
	}
	for _, s := range suite {
		switch {
		case len(only) > 0 && !slices.Contains(only, s.name):
		case len(only) == 0 && short && !s.short:
		default:
			out = append(out, s)
		}
	}
	return out, nil
}

// runScenario starts a fresh fleet, runs sc on it and stops the fleet; it returns the
// result and the ids of every process it started.
func runScenario(ctx context.Context, e *env, sc scenario, bins fleet.Binaries, logDir string) (res ScenarioResult, pids []int) {
	start := time.Now()
	fmt.Fprintf(e.progress, "== %s: %s\n", sc.name, sc.about)
	ctx, cancel := context.WithTimeout(ctx, scenarioTimeout)
	defer cancel()
	cfg := FleetConfig{Bin: bins, Features: e.features, LogDir: logDir}
	if sc.gatewayArgs != nil {
		cfg.GatewayArgs = sc.gatewayArgs(e)
	}
	defer func() {
		res.Name, res.Took = sc.name, time.Since(start)
		if res.Err != nil && errors.Is(res.Err, context.Canceled) {
			res.Err = errors.New("interrupted")
		}
		fmt.Fprintf(e.progress, "   %s in %v\n", res.verdict(), res.Took.Round(100*time.Millisecond))
	}()
	f, err := StartFleet(ctx, cfg)
	if err != nil {
		return ScenarioResult{Err: fmt.Errorf("fleet did not start: %w", err)}, nil
	}
	c := NewClient(f.GatewayURL, 64)
	before, pidsBefore := f.RSSAll(), pidMap(f)
	res = sc.run(ctx, e, f, c)
	after, pidsAfter := f.RSSAll(), pidMap(f)
	c.Close()
	f.Stop()
	for i, n := range ProcNames {
		res.RSS = append(res.RSS, ProcRSS{Name: n, Before: before[i], After: after[i], Restarted: pidsAfter[n] != pidsBefore[n] && after[i] >= 0})
	}
	if res.Err == nil && ctx.Err() != nil {
		res.Err = ctx.Err()
	}
	return res, f.PIDs()
}

func pidMap(f *Fleet) map[string]int {
	m := make(map[string]int, len(ProcNames))
	for _, n := range ProcNames {
		m[n] = f.PID(n)
	}
	return m
}

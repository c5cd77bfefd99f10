// Command bench is the Switchyard bench tool: scenario runner, load driver and the
// load-balancer microbenchmark.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/bench/report"
	"github.com/switchyard/switchyard/bench/runner"
	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/scenarios"
	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/bench/simulate"
	"github.com/switchyard/switchyard/internal/cmdline"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type cli struct {
	// --version, --config, --log-format, --log-level (the runner's own log lines).
	Common cmdline.Flags `embed:""`

	LBMicrobench microbenchCmd    `cmd:"" name:"lb-microbench" help:"Measure the cost of one routing decision per algorithm (the reference router's microbenchmark scenarios)."`
	Run          runCmd           `cmd:"" help:"Launch a local fleet for a scenario once per algorithm, drive it and compare the algorithms."`
	Drive        driveCmd         `cmd:"" help:"Drive an existing OpenAI-compatible endpoint with a scenario's requests."`
	ListScenario listScenariosCmd `cmd:"" name:"list-scenarios" help:"List the bundled scenarios."`
	Overhead     overheadCmd      `cmd:"" help:"Measure the latency the pylon and the gateway add, next to a bare fasthttp proxy, each in its own process."`
	Throughput   throughputCmd    `cmd:"" help:"Compare the gateway's throughput with nginx and HAProxy round-robin over the same two pylons (needs nginx; HAProxy is skipped when absent)."`
	BareProxy    bareProxyCmd     `cmd:"" name:"bare-proxy" hidden:"" help:"Run a bare fasthttp reverse proxy (the overhead command's baseline)."`
	Chaos        chaosCmd         `cmd:"" help:"Fault suite on a local 2-backend fleet (kills, freezes, slowloris, oversized bodies, junk registrations, broken streams) checked against budgets."`
	Soak         soakCmd          `cmd:"" help:"Mixed load for --duration (10m) with a fault every 30 s; checks outcome accounting, gateway heap growth and goroutines."`
	Simulate     simulateCmd      `cmd:"" help:"Replay a scenario through the balancers against modelled engines in virtual time (no processes; milliseconds per run), optionally over a --grid of settings."`
	ControlPlane controlPlaneCmd  `cmd:"" name:"control-plane" help:"Simulate N pylons in this process registering and heartbeating against real gateways; report the gateways' CPU for it."`
	Streams      streamsCmd       `cmd:"" help:"Hold N long streams open at once through one gateway and one pylon to the mock engine; report errors, time to first byte and memory per open stream."`
}

// loadScenario reads a scenario file, or a bundled scenario by name when no such file
// exists. Errors are one line.
func loadScenario(name string) (*scenario.Scenario, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		bundled, berr := scenarios.Read(name)
		if berr != nil {
			return nil, fmt.Errorf("scenario %s: %w (and no bundled scenario has that name; see bench list-scenarios)", name, err)
		}
		data = bundled
	}
	s, err := scenario.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %s", name, scenario.OneLine(err))
	}
	return s, nil
}

type scenarioFlags struct {
	Scenario  string  `required:"" placeholder:"FILE" help:"Scenario YAML file, or the name of a bundled scenario."`
	Seed      *uint64 `help:"Manifest seed (default: the scenario's seed)."`
	TimeScale float64 `name:"time-scale" default:"1" help:"Multiplies engine delays and arrival offsets (0.1 runs ten times faster)."`
	Out       string  `placeholder:"DIR" help:"Output directory for report.md, results.json and charts (run default: out/<scenario>)."`
}

func (f *scenarioFlags) validate() error {
	if f.TimeScale <= 0 {
		return errors.New("--time-scale must be > 0")
	}
	return nil
}

func (f *scenarioFlags) seed(s *scenario.Scenario) uint64 {
	if f.Seed != nil {
		return *f.Seed
	}
	return s.Seed
}

type runCmd struct {
	scenarioFlags
	Algorithms   []string      `sep:"," help:"Only these algorithms (labels from the scenario), comma-separated."`
	Grid         []string      `sep:"none" placeholder:"FIELD=V1,V2,..." help:"Run the one algorithm named by --algorithms once per combination of these values of its model entry's fields (repeatable), as bench simulate --grid does; the scenario's expect checks are skipped."`
	Replicas     []int         `sep:"," placeholder:"N" help:"Run every algorithm once per gateway replica count (stargates.count overridden, e.g. 1,2,4), an algorithm's counts one after another; runs are labelled NAME@N, the report compares each count with the first (TTFT p95 ratio, cache-hit points, engine queued), and the scenario's expect checks are skipped."`
	SlotShares   *bool         `name:"slot-shares" negatable:"" help:"Give every pylon of a cluster of several pylons its share of the engine's slots (--engine-slot-share), for every algorithm whose pylons run queue admission with its free-slot rule (which enforces a share), or (--no-slot-shares) none; unset: as each algorithm's pylon_queue_admission.slot_shares says (default none)."`
	BinDir       string        `name:"bin-dir" default:"bin" help:"Directory holding the engine, pylon and gateway binaries."`
	ReadyTimeout time.Duration `name:"ready-timeout" default:"30s" help:"How long each fleet may take to become routable."`
	Expect       bool          `default:"true" negatable:"" help:"Exit 1 when a check of the scenario's expect section is missed (--no-expect: report the checks, exit 0)."`
}

func (c *runCmd) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	return validReplicas(c.Replicas, len(c.Grid) > 0)
}

// maxReplicas bounds --replicas: each replica is a gateway process every pylon registers
// with, on the one machine the bench runs on.
const maxReplicas = 16

// validReplicas checks --replicas: counts 1..maxReplicas, each once, and not with --grid
// (both relabel the runs).
func validReplicas(counts []int, grid bool) error {
	if len(counts) == 0 {
		return nil
	}
	if grid {
		return errors.New("--replicas and --grid cannot be combined")
	}
	for i, n := range counts {
		if n < 1 || n > maxReplicas {
			return fmt.Errorf("--replicas: %d is not a replica count (1..%d)", n, maxReplicas)
		}
		if slices.Contains(counts[:i], n) {
			return fmt.Errorf("--replicas: %d is given twice", n)
		}
	}
	return nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Run runs the scenario; common holds the global flags (its logger is the runner's).
func (c *runCmd) Run(common *cmdline.Flags) error {
	s, err := loadScenario(c.Scenario)
	if err != nil {
		return err
	}
	logger, err := common.Logger()
	if err != nil {
		return cmdline.Config(err)
	}
	out := c.Out
	if out == "" {
		out = filepath.Join("out", scenario.Slug(s.Name))
	}
	if c.SlotShares != nil {
		s.SetSlotShares(*c.SlotShares)
	}
	algorithms := c.Algorithms
	if len(c.Grid) > 0 {
		if err := gridScenario(s, c.Algorithms, c.Grid); err != nil {
			return err
		}
		algorithms = nil
	}
	ctx, stop := signalContext()
	defer stop()
	rep, err := runner.Run(ctx, runner.Options{
		Scenario: s, Seed: c.seed(s), TimeScale: c.TimeScale, Algorithms: algorithms, OutDir: out,
		Bin: fleet.BinariesIn(c.BinDir), ReadyTimeout: c.ReadyTimeout, Progress: newProgress(os.Stderr),
		Logger: logger, Replicas: c.Replicas,
	})
	if ctx.Err() != nil {
		return errors.New("interrupted; every fleet process was stopped")
	}
	if err != nil {
		if rep != nil && len(rep.Runs) > 0 {
			if paths, werr := runner.Write(out, rep); werr == nil {
				fmt.Fprintf(os.Stderr, "partial report for the finished algorithms: %s\n", paths[0])
			}
		}
		return err
	}
	if err := finish(os.Stdout, out, rep); err != nil {
		return err
	}
	if len(c.Grid) > 0 {
		printBestRun(os.Stdout, rep.Runs)
	}
	return expectErr(rep.Expectations, c.Expect)
}

// gridScenario replaces s's algorithms by one variant of the algorithm named in algs per
// point of the grid (each named by its settings, as bench simulate names them) and drops
// the scenario's expect checks, which name the original algorithms.
func gridScenario(s *scenario.Scenario, algs, grid []string) error {
	if len(algs) != 1 {
		return fmt.Errorf("--grid needs exactly one algorithm (--algorithms NAME), got %d", len(algs))
	}
	i := slicesIndex(s.Algorithms, algs[0])
	if i < 0 {
		return fmt.Errorf("--algorithms: the scenario has no algorithm %q", algs[0])
	}
	axes := make([]simulate.Axis, 0, len(grid))
	for _, spec := range grid {
		ax, err := simulate.ParseAxis(spec)
		if err != nil {
			return err
		}
		axes = append(axes, ax)
	}
	variants, err := simulate.Variants(s, &s.Algorithms[i], axes)
	if err != nil {
		return err
	}
	s.Algorithms, s.Expect = variants, nil
	return nil
}

// printBestRun prints the grid point bench simulate would call best: fewest failures,
// then lowest mean TTFT.
func printBestRun(w io.Writer, runs []report.Run) {
	var best *score.Summary
	for i := range runs {
		r := &runs[i].Summary
		if best == nil || r.Requests-r.Successes < best.Requests-best.Successes ||
			(r.Requests-r.Successes == best.Requests-best.Successes && r.TTFT.Avg < best.TTFT.Avg) {
			best = r
		}
	}
	if best != nil {
		_, _ = fmt.Fprintf(w, "\nbest (fewest failures, then lowest mean TTFT): %s\n", best.Algorithm)
	}
}

// expectErr is the run's verdict on its expect checks: an error naming how many missed
// when enforce is set, else nil.
func expectErr(outs []score.Outcome, enforce bool) error {
	n := score.MissedCount(outs)
	if n == 0 || !enforce {
		return nil
	}
	return fmt.Errorf("%d of %d expect checks missed (listed above and in the report; --no-expect reports them without failing)", n, len(outs))
}

func finish(w io.Writer, out string, rep *report.Report) error {
	paths, err := runner.Write(out, rep)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s (seed %d, %d requests, time scale %g)\n\n", rep.Scenario, rep.Seed, rep.Requests, rep.TimeScale)
	if err := report.Table(w, rep.Runs); err != nil {
		return err
	}
	for _, ig := range rep.Ignored {
		fmt.Fprintf(w, "ignored: %s\n", ig)
	}
	if err := report.Expectations(w, rep.Expectations); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nreport: %s\nresults: %s\ncharts:", paths[0], paths[1])
	for _, p := range paths[2:] {
		fmt.Fprintf(w, " %s", p)
	}
	fmt.Fprintln(w)
	return nil
}

type driveCmd struct {
	scenarioFlags
	Target string `required:"" placeholder:"URL" help:"Base URL of the OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000."`
	Path   string `default:"/v1/chat/completions" help:"Request path."`
}

func (c *driveCmd) Validate() error { return c.validate() }

func (c *driveCmd) Run() error {
	s, err := loadScenario(c.Scenario)
	if err != nil {
		return err
	}
	out := c.Out
	if out == "" {
		out = filepath.Join("out", "drive-"+scenario.Slug(s.Name))
	}
	ctx, stop := signalContext()
	defer stop()
	rep, err := runner.Drive(ctx, runner.DriveOptions{
		Scenario: s, Seed: c.seed(s), TimeScale: c.TimeScale, Target: c.Target, Path: c.Path, Progress: newProgress(os.Stderr),
	})
	if rep == nil {
		return err
	}
	if werr := finish(os.Stdout, out, rep); werr != nil {
		return errors.Join(err, werr)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted; the report covers the requests sent")
	}
	return err
}

type listScenariosCmd struct{}

func (*listScenariosCmd) Run() error { return listScenarios(os.Stdout) }

func listScenarios(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "name\trequests\tconcurrency\tbackends\tclusters\tgateways\ttraffic\talgorithms\truntime")
	for _, n := range scenarios.Names() {
		data, err := scenarios.Read(n)
		if err != nil {
			return err
		}
		s, err := scenario.Parse(data)
		if err != nil {
			return fmt.Errorf("bundled scenario %s: %s", n, scenario.OneLine(err))
		}
		top := s.Topology()
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", n, s.RequestCount, s.MaxConcurrency, len(top.Backends),
			len(top.Clusters), s.GatewayCount(), s.TrafficPattern.Kind, len(s.Algorithms), s.Metadata.ExpectedRuntime)
	}
	return w.Flush()
}

// options are the kong options of the command line (shared with the tests); c's
// global flags are bound for the commands' Run methods.
func options(c *cli) []kong.Option {
	return append(cmdline.Options("bench",
		"Switchyard bench: runs a local fleet, drives workloads and compares routing algorithms side by side.", version),
		kong.Bind(&c.Common))
}

func main() {
	var c cli
	cmdline.Main(&c, options(&c)...)
}

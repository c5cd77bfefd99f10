package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/internal/overhead"
)

const overheadModel = "dummy-model"

// overheadCmd measures the pylon's and the gateway's added latency next to a bare proxy,
// every component in its own process (budget: at most 1.25× what the bare proxy adds).
type overheadCmd struct {
	Requests     int           `default:"20000" help:"Measured requests per path (seven paths)."`
	Warmup       int           `default:"2000" help:"Unmeasured requests per path before measuring."`
	BinDir       string        `name:"bin-dir" default:"bin" help:"Directory holding the engine, pylon, gateway and bench binaries."`
	ReadyTimeout time.Duration `name:"ready-timeout" default:"20s" help:"How long the fleet may take to become routable."`
	Logs         string        `placeholder:"DIR" help:"Keep the children's logs in DIR (default: a temporary directory, removed)."`
	Contend      int           `default:"0" placeholder:"N" help:"Run N more copies of the whole measurement (fleet and client, each its own bench process, measuring without end) while this one measures, so the CPUs are never idle: the machine's busiest phases on demand. 0: none."`
}

func (c *overheadCmd) Validate() error {
	if c.Requests <= 0 || c.Warmup < 0 {
		return errors.New("--requests must be > 0 and --warmup >= 0")
	}
	if c.Contend < 0 || c.Contend > maxContend {
		return fmt.Errorf("--contend must be between 0 and %d", maxContend)
	}
	return nil
}

func (c *overheadCmd) Run() error {
	ctx, stop := signalContext()
	defer stop()
	bins := fleet.BinariesIn(c.BinDir)
	if err := bins.Check(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logs := c.Logs
	if logs == "" {
		if logs, err = os.MkdirTemp("", "switchyard-overhead-"); err != nil {
			return err
		}
		defer os.RemoveAll(logs)
	} else if err := os.MkdirAll(logs, 0o750); err != nil {
		return err
	}
	proxyNames := [...]string{"proxy-engine", "proxy-pylon", "proxy-b-pylon"}
	proxyBins, removeCopies := proxyExecutables(self, proxyNames[:]...)
	defer removeCopies()
	ports, err := fleet.FreePorts(ctx, 8)
	if err != nil {
		return err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	engine, pylon, gateway, proxyEngine, proxyPylon, controlPylon := addr(0), addr(1), addr(2), addr(3), addr(4), addr(5)
	gatewayAdmin, pylonAdmin := addr(6), addr(7)
	specs := []fleet.Spec{
		{Name: "engine", Path: bins.Engine, Args: []string{"--http-listen-addr", engine, "--num-tokens", "1", "--token-delay", "0s", "--log-level", "warn"}},
		{Name: "gateway", Path: bins.Gateway, Args: []string{"--http-listen-addr", gateway, "--admin-listen-addr", gatewayAdmin, "--log-level", "warn"}},
		{Name: "pylon", Path: bins.Pylon, Args: []string{
			"--http-listen-addr", pylon, "--admin-listen-addr", pylonAdmin, "--upstream-http-base-url", "http://" + engine, "--model-name", overheadModel,
			"--gateway", "http://" + gatewayAdmin, "--inference-server-id", "overhead", "--initial-input-tps", "100000",
			"--engine-stats-stream", "off", "--log-level", "warn",
		}},
		{Name: proxyNames[0], Path: proxyBins[0], Args: []string{"bare-proxy", "--listen", proxyEngine, "--upstream", engine}},
		{Name: proxyNames[1], Path: proxyBins[1], Args: []string{"bare-proxy", "--listen", proxyPylon, "--upstream", pylon}},
		{Name: proxyNames[2], Path: proxyBins[2], Args: []string{"bare-proxy", "--listen", controlPylon, "--upstream", pylon}},
	}
	group := &fleet.Group{}
	defer group.Stop(fleet.StopGrace)
	procs, err := startChildren(group, specs, logs)
	if err != nil {
		return err
	}
	if err := waitRoutable(ctx, gatewayAdmin, 1, c.ReadyTimeout); err != nil {
		return fmt.Errorf("%w (logs in %s; use --logs DIR to keep them)", err, logs)
	}
	if err := c.contend(ctx, group, self, logs); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s %d requests per path (+%d warm-up), seven paths in a random order each round…\n", measuringLine, c.Requests, c.Warmup)
	cpuBefore := cpuTimes(procs)
	res, err := overhead.Measure(ctx, overhead.Targets{engine, proxyEngine, pylon, pylon, proxyPylon, gateway, controlPylon}, overheadModel, c.Requests, c.Warmup)
	if err != nil {
		return err
	}
	cpuAfter := cpuTimes(procs)
	if err := writeOverhead(os.Stdout, res); err != nil {
		return err
	}
	// Each process's CPU per request it served: the three proxies and the gateway serve one
	// path, the pylon five and the engine all seven.
	served := map[string]int{"engine": overhead.NumPaths, "pylon": 5}
	fmt.Printf("\n%s\n", cpuPerRequest(specs, served, cpuBefore, cpuAfter, c.Requests+c.Warmup))
	// The gateway's own view of the same requests: its time before the upstream call and
	// the upstream call itself, as means.
	if status, body, err := fasthttp.GetTimeout(nil, "http://"+gatewayAdmin+"/metrics", time.Second); err == nil && status == fasthttp.StatusOK {
		mean := func(name string) string {
			var sum, count float64
			for _, line := range strings.Split(string(body), "\n") {
				if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], name) {
					v, _ := strconv.ParseFloat(f[1], 64)
					switch {
					case strings.HasPrefix(f[0], name+"_sum"):
						sum += v
					case strings.HasPrefix(f[0], name+"_count"):
						count += v
					}
				}
			}
			if count == 0 {
				return "n/a"
			}
			return strconv.FormatFloat(sum/count*1e6, 'f', 1, 64) + " µs"
		}
		registrations := "n/a"
		for _, line := range strings.Split(string(body), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == `switchyard_registrations_total{result="accepted"}` {
				registrations = f[1]
			}
		}
		fmt.Printf("\ngateway's own view (means): routing before the upstream call %s, upstream call %s; registrations received %s "+
			"(the pylon's heartbeats and change-driven updates)\n",
			mean("switchyard_gateway_overhead_seconds"), mean("switchyard_proxy_duration_seconds"), registrations)
	}
	return nil
}

// maxContend bounds --contend: each copy is seven processes.
const maxContend = 8

// measuringLine starts the line a measurement prints once its fleet is ready; contend
// waits for it in each copy's log.
const measuringLine = "measuring"

// contend starts c.Contend copies of this measurement into group, each measuring without
// end (until group stops them), and waits until every one of them is measuring.
func (c *overheadCmd) contend(ctx context.Context, group *fleet.Group, self, logs string) error {
	if c.Contend == 0 {
		return nil
	}
	specs := make([]fleet.Spec, c.Contend)
	for i := range specs {
		name := "contend-" + strconv.Itoa(i+1)
		specs[i] = fleet.Spec{Name: name, Path: self, Args: []string{
			"overhead", "--bin-dir", c.BinDir, "--requests", strconv.Itoa(math.MaxInt32), "--warmup", "0",
			"--ready-timeout", c.ReadyTimeout.String(), "--contend", "0", // explicit: flags win over inherited $SWITCHYARD_BENCH_*
			"--logs", filepath.Join(logs, name),
		}}
	}
	if _, err := startChildren(group, specs, logs); err != nil {
		return err
	}
	deadline := time.Now().Add(c.ReadyTimeout)
	for _, sp := range specs {
		measuring := func() bool {
			b, err := os.ReadFile(filepath.Join(logs, sp.Name+".log"))
			return err == nil && strings.Contains(string(b), measuringLine)
		}
		if err := pollUntil(ctx, deadline, measuring); err != nil {
			return fmt.Errorf("%s did not start measuring within %v: %w (logs in %s; use --logs DIR to keep them)", sp.Name, c.ReadyTimeout, err, logs)
		}
	}
	fmt.Fprintf(os.Stderr, "%d contending copies are measuring\n", c.Contend)
	return nil
}

// proxyExecutables returns one private copy of self per name (see privateCopies), made
// beside self (a directory executables run from) or else in the temporary directory, and
// a function that removes them. When neither can hold them it warns and returns self for
// every name.
func proxyExecutables(self string, names ...string) ([]string, func()) {
	var errs []error
	for _, parent := range []string{filepath.Dir(self), ""} {
		sweepStaleCopies(parent)
		dir, err := os.MkdirTemp(parent, copiesPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		paths, err := privateCopies(self, dir, names...)
		if err == nil {
			return paths, func() { _ = os.RemoveAll(dir) }
		}
		errs = append(errs, err)
		_ = os.RemoveAll(dir)
	}
	fmt.Fprintf(os.Stderr, "warning: the bare proxies run from %s itself, sharing its machine code with the client (which favours them): %v\n", self, errors.Join(errs...))
	paths := make([]string, len(names))
	for i := range paths {
		paths[i] = self
	}
	return paths, func() {}
}

// copiesPrefix starts the name of a directory of proxy copies; the creating process's id
// follows, then a random suffix.
const copiesPrefix = ".switchyard-overhead-bin-"

// sweepStaleCopies removes the directories of proxy copies in parent ("" = the temporary
// directory) whose creating process is gone — left behind by a bench that was killed
// before it could remove them (each holds three copies of this executable). A directory
// whose process still runs, or that does not name one, is left alone.
func sweepStaleCopies(parent string) {
	if parent == "" {
		parent = os.TempDir()
	}
	dirs, _ := filepath.Glob(filepath.Join(parent, copiesPrefix+"*"))
	for _, dir := range dirs {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), copiesPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// privateCopies copies the executable self into dir once per name and returns the copies'
// paths. Each bare proxy runs from its own copy: run from self, a proxy would share its
// machine code with the measuring client and the other proxies — the same pages of the
// page cache, so the same lines of the CPU caches — which no deployed proxy (nor the
// gateway, nor the pylon) does. Under load that sharing made a proxy measurably faster: a
// byte-identical copy of this binary measured 1.14–1.21× the original's added latency.
func privateCopies(self, dir string, names ...string) ([]string, error) {
	src, err := os.ReadFile(self)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(names))
	for i, name := range names {
		paths[i] = filepath.Join(dir, name)
		if err := os.WriteFile(paths[i], src, 0o700); err != nil { //nolint:gosec // an executable, private to this user
			return nil, err
		}
	}
	return paths, nil
}

// startChildren starts every spec into group, each logging to <logDir>/<name>.log, and
// returns them in the specs' order.
func startChildren(group *fleet.Group, specs []fleet.Spec, logDir string) ([]*fleet.Proc, error) {
	procs := make([]*fleet.Proc, 0, len(specs))
	for _, sp := range specs {
		lf, err := os.Create(filepath.Join(logDir, sp.Name+".log"))
		if err != nil {
			return nil, err
		}
		p, err := fleet.Start(sp, lf)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", sp.Name, err)
		}
		group.Add(p)
		procs = append(procs, p)
	}
	return procs, nil
}

// cpuTimes reads each process's CPU time so far; < 0 where it cannot be read.
func cpuTimes(procs []*fleet.Proc) []time.Duration {
	out := make([]time.Duration, len(procs))
	for i, p := range procs {
		d, err := fleet.CPUTime(p.PID())
		if err != nil {
			d = -1
		}
		out[i] = d
	}
	return out
}

// cpuPerRequest says how much CPU each process used per request it served, from its CPU
// times before and after the measurement; served names how many paths a process serves
// (1 when absent), each carrying perPath requests.
func cpuPerRequest(specs []fleet.Spec, served map[string]int, before, after []time.Duration, perPath int) string {
	var b strings.Builder
	b.WriteString("CPU per request served (user + system of the whole process, warm-up included; 10 ms clock ticks):")
	sep := " "
	for i, sp := range specs {
		paths := max(served[sp.Name], 1)
		if before[i] < 0 || after[i] < 0 || perPath <= 0 {
			fmt.Fprintf(&b, "%s%s n/a", sep, sp.Name)
		} else {
			per := float64(after[i]-before[i]) / float64(time.Microsecond) / float64(paths*perPath)
			fmt.Fprintf(&b, "%s%s %.1f µs", sep, sp.Name, per)
		}
		if paths > 1 {
			fmt.Fprintf(&b, " (%d paths)", paths)
		}
		sep = ", "
	}
	return b.String()
}

// waitRoutable polls the gateway's /debug/state until n backends are routable.
func waitRoutable(ctx context.Context, gateway string, n int, timeout time.Duration) error {
	routable := func() bool {
		status, body, err := fasthttp.GetTimeout(nil, "http://"+gateway+"/debug/state", time.Second)
		return err == nil && status == fasthttp.StatusOK && strings.Count(string(body), `"routable": true`) >= n
	}
	if err := pollUntil(ctx, time.Now().Add(timeout), routable); err != nil {
		return fmt.Errorf("the gateway saw fewer than %d routable backends within %v: %w", n, timeout, err)
	}
	return nil
}

var errTimedOut = errors.New("timed out")

// pollUntil calls ok every 50 ms until it returns true (nil), the deadline passes
// (errTimedOut) or ctx ends (its error).
func pollUntil(ctx context.Context, deadline time.Time, ok func() bool) error {
	for !ok() {
		if time.Now().After(deadline) {
			return errTimedOut
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// The quantiles the budget bounds, as the report names them.
var (
	reportQs     = [2]float64{0.5, 0.99}
	reportQNames = [2]string{"p50", "p99"}
)

// The budget and how the report settles it (see overhead.Resample).
const (
	overheadBudget = 1.25
	intervalLevel  = 0.95
	intervalDraws  = 1000
	intervalBlock  = 64 // rounds, about a tenth of a second
	// controlTolerance is the A/A deviation below which a control outside its interval is
	// not worth a warning.
	controlTolerance = 0.05
)

func writeOverhead(w io.Writer, r *overhead.Result) error {
	us := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 1, 64)
	}
	rs := r.Resample(reportQs[:], intervalDraws, intervalBlock, 1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "path\tp50 µs\tp90 µs\tp99 µs")
	for p, name := range overhead.PathNames {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, us(r.Quantile(p, 0.5)), us(r.Quantile(p, 0.9)), us(r.Quantile(p, 0.99)))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "hop\tadded p50 µs\tadded p99 µs\tvs bare proxy p50\tvs bare proxy p99\t%.0f %% intervals p50, p99\t(budget ≤ %.2f)\n", 100*intervalLevel, overheadBudget)
	type verdict struct {
		name string
		in   [2]overhead.Interval
	}
	verdicts := make([]verdict, 0, 2)
	row := func(name string, comp, proxy, base int) verdict {
		v := verdict{name: name}
		for qi := range v.in {
			v.in[qi] = rs.RatioInterval(comp, proxy, base, qi, intervalLevel)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f×\t%.2f×\t%s, %s\t\n", name, us(r.Added(comp, base, 0.5)), us(r.Added(comp, base, 0.99)),
			r.Ratio(comp, proxy, base, 0.5), r.Ratio(comp, proxy, base, 0.99), interval(v.in[0]), interval(v.in[1]))
		return v
	}
	fmt.Fprintf(tw, "bare proxy → engine\t%s\t%s\t\t\t\t\n", us(r.Added(overhead.ProxyEngine, overhead.Engine, 0.5)), us(r.Added(overhead.ProxyEngine, overhead.Engine, 0.99)))
	verdicts = append(verdicts, row("pylon → engine", overhead.PylonEngine, overhead.ProxyEngine, overhead.Engine))
	fmt.Fprintf(tw, "bare proxy → pylon\t%s\t%s\t\t\t\t\n", us(r.Added(overhead.ProxyPylon, overhead.Pylon, 0.5)), us(r.Added(overhead.ProxyPylon, overhead.Pylon, 0.99)))
	verdicts = append(verdicts, row("gateway → pylon", overhead.GatewayPylon, overhead.ProxyPylon, overhead.Pylon))
	control := row("bare proxy B → pylon", overhead.ControlPylon, overhead.ProxyPylon, overhead.Pylon)
	if err := tw.Flush(); err != nil {
		return err //nolint:wrapcheck // the writer's own error
	}
	fmt.Fprintf(w, "\nThe intervals: %.0f %% of %d redraws of this run's own rounds (a bootstrap) gave a ratio in them.\n", 100*intervalLevel, intervalDraws)
	aa50 := r.Ratio(overhead.ControlPylon, overhead.ProxyPylon, overhead.Pylon, 0.5) - 1
	aa99 := r.Ratio(overhead.ControlPylon, overhead.ProxyPylon, overhead.Pylon, 0.99) - 1
	fmt.Fprintf(w, "noise floor: bare proxy B is the same code as the bare proxy, in its own process (an A/A control); "+
		"in this run it measured %+.0f %% at p50 and %+.0f %% at p99.\n", 100*aa50, 100*aa99)
	// The control's 95 % intervals leave out 1.00× in about one run in ten by chance alone
	// (two of them); a 99 % interval and a material deviation make a false alarm rare.
	for qi, dev := range [2]float64{aa50, aa99} {
		if wide := rs.RatioInterval(overhead.ControlPylon, overhead.ProxyPylon, overhead.Pylon, qi, 0.99); !wide.Contains(1) && math.Abs(dev) > controlTolerance {
			fmt.Fprintf(w, "warning: the A/A control's 99 %% interval at %s leaves out 1.00×: the two identical proxies differed by "+
				"more than this run's own spread explains (the machine's load changed in a way that hit them unevenly), so the "+
				"verdicts below may be off too; run it again.\n", reportQNames[qi])
			break
		}
	}
	for _, v := range verdicts {
		fmt.Fprintf(w, "%s: %s\n", v.name, settle(v.in, control.in))
	}
	return nil
}

// interval formats a ratio interval.
func interval(in overhead.Interval) string {
	if math.IsInf(in.Hi, 1) {
		return fmt.Sprintf("%.2f–∞", in.Lo)
	}
	return fmt.Sprintf("%.2f–%.2f", in.Lo, in.Hi)
}

// settle states what a component's p50 and p99 intervals say about the budget. control
// holds the A/A control's intervals: where the control's own interval reaches past the
// budget too, the run was too short to settle that quantile even for identical code, and
// the advice says so (p99 needs many more requests than p50).
func settle(in, control [2]overhead.Interval) string {
	var over, open, blind []string
	for qi, i := range in {
		switch {
		case i.Lo > overheadBudget:
			over = append(over, reportQNames[qi])
		case i.Hi > overheadBudget:
			open = append(open, reportQNames[qi])
			if control[qi].Hi > overheadBudget {
				blind = append(blind, reportQNames[qi])
			}
		}
	}
	switch {
	case len(over) > 0:
		return fmt.Sprintf("over the budget at %s in this run (the whole interval is above %.2f×).", strings.Join(over, " and "), overheadBudget)
	case len(blind) > 0:
		return fmt.Sprintf("not settled at %s by this run (the interval reaches past %.2f×); the A/A control's interval at %s reaches past it too, "+
			"so this run was too short to settle it even for identical code: run with more --requests (100000 settles p99 on a 2-core VM).",
			strings.Join(open, " and "), overheadBudget, strings.Join(blind, " and "))
	case len(open) > 0:
		return fmt.Sprintf("not settled at %s by this run (the interval reaches past %.2f×); run it again, or with more --requests.", strings.Join(open, " and "), overheadBudget)
	}
	return fmt.Sprintf("within the budget at p50 and p99 in this run (both intervals end at or below %.2f×).", overheadBudget)
}

// bareProxyCmd is the bare fasthttp reverse proxy the overhead command measures against.
type bareProxyCmd struct {
	Listen     string `required:"" help:"Listen address (host:port)."`
	Upstream   string `required:"" help:"Upstream address (host:port; several, comma-separated, are dialled in turn)."`
	CPUProfile string `name:"cpu-profile" placeholder:"FILE" help:"Write a CPU profile of the proxy's whole run to FILE (go tool pprof)."`
}

func (c *bareProxyCmd) Run() error {
	ctx, stop := signalContext()
	defer stop()
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	h, closeIdle := overhead.BareProxy(c.Upstream)
	defer closeIdle()
	s := &fasthttp.Server{Handler: h, NoDefaultServerHeader: true}
	go func() {
		<-ctx.Done()
		_ = s.Shutdown()
	}()
	return s.Serve(ln)
}

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/bench/controlplane"
	"github.com/switchyard/switchyard/bench/fleet"
)

// controlPlaneCmd measures the gateway's CPU for a fleet's registrations and heartbeats:
// --pylons simulated pylons in this process, each registering with every gateway and
// heartbeating every --rate with the pylon's own registration client.
type controlPlaneCmd struct {
	Pylons              int           `default:"1000" help:"Simulated pylons (one model each), all in this process, each running the pylon's registrar and on its own keep-alive connection to each gateway."`
	Gateways            int           `default:"1" help:"Gateway processes; every pylon registers with each."`
	Rate                time.Duration `default:"1s" help:"Each pylon's heartbeat period (its --min-update-interval): a full registration (PUT /control/v1/backends/{id}) or, between full ones to a gateway that takes them, a load update (PATCH), every period."`
	FullInterval        time.Duration `name:"full-registration-interval" default:"30s" help:"The pylons' --full-registration-interval: longest time between full registrations to a gateway that takes load updates (0: full registrations only, as pylons sent before load updates)."`
	Warmup              time.Duration `default:"5s" help:"Heartbeats before measuring (every pylon has registered by then)."`
	Duration            time.Duration `default:"30s" help:"Measurement window: the gateways' CPU time (/proc/PID/stat) over it. The default holds one --full-registration-interval, so the window sees the steady mix of full registrations and load updates."`
	HealthProbeInterval time.Duration `name:"health-probe-interval" default:"1h" help:"The gateways' --health-probe-interval. The simulated pylons' URLs answer nothing, so the default keeps the gateways' RTT probes out of the figure; the figure is then registrations alone."`
	Baseline            bool          `help:"Instead of heartbeats, every simulated pylon GETs each gateway's admin /healthz every --rate on its own connection: the cost of the HTTP exchange alone, which the heartbeats' cost sits on."`
	BinDir              string        `name:"bin-dir" default:"bin" help:"Directory holding the gateway binary."`
	Logs                string        `placeholder:"DIR" help:"Keep the gateways' logs in DIR (default: a temporary directory, removed)."`
	Profile             string        `placeholder:"DIR" help:"Run the gateways with --enable-pprof and save the first one's CPU profile over the measurement window in DIR (go tool pprof DIR/gateway-cpu.pprof)."`
}

func (c *controlPlaneCmd) Validate() error {
	if c.Pylons <= 0 || c.Gateways <= 0 || c.Rate <= 0 || c.Duration <= 0 || c.Warmup < 0 || c.FullInterval < 0 {
		return errors.New("--pylons, --gateways, --rate and --duration must be > 0, --warmup and --full-registration-interval >= 0")
	}
	if c.Rate < 100*time.Millisecond || c.Rate > time.Minute {
		return errors.New("--rate must be within 100ms–1m (the heartbeats gateways accept)")
	}
	return nil
}

// controlPlaneToken is the control token of the run (any value: the gateways read it from a file).
const controlPlaneToken = "bench-control-plane-token"

func (c *controlPlaneCmd) Run() error {
	ctx, stop := signalContext()
	defer stop()
	bins := fleet.BinariesIn(c.BinDir)
	if err := bins.Check(); err != nil {
		return err
	}
	if err := raiseNoFile(uint64(c.Pylons*c.Gateways + fdsSpare)); err != nil { //nolint:gosec // c.Pylons, c.Gateways > 0
		return err
	}
	logs, err := logDir(c.Logs, "switchyard-control-plane-")
	if err != nil {
		return err
	}
	where := "logs in " + logs
	if c.Logs == "" {
		defer os.RemoveAll(logs)
		where = "rerun with --logs DIR to keep the gateways' logs"
	}
	tokenFile := filepath.Join(logs, "control-token")
	if err := os.WriteFile(tokenFile, []byte(controlPlaneToken), 0o600); err != nil {
		return err
	}
	ports, err := fleet.FreePorts(ctx, 2*c.Gateways+1)
	if err != nil {
		return err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	specs := make([]fleet.Spec, c.Gateways)
	admins := make([]string, c.Gateways)
	for g := range specs {
		admins[g] = addr(2*g + 1)
		specs[g] = fleet.Spec{Name: "gateway-" + strconv.Itoa(g), Path: bins.Gateway, Args: []string{
			"--http-listen-addr", addr(2 * g), "--admin-listen-addr", admins[g], "--control-token-file", tokenFile,
			"--health-probe-interval", c.HealthProbeInterval.String(), "--max-connections", "0", "--log-level", "warn",
		}}
		if c.Profile != "" {
			specs[g].Args = append(specs[g].Args, "--enable-pprof")
		}
	}
	group := &fleet.Group{}
	defer group.Stop(fleet.StopGrace)
	procs, err := startChildren(group, specs, logs)
	if err != nil {
		return err
	}
	for g := range specs {
		public := addr(2 * g)
		if err := pollUntil(ctx, time.Now().Add(20*time.Second), func() bool {
			status, _, err := fasthttp.GetTimeout(nil, "http://"+public+"/healthz", time.Second)
			return err == nil && status != 0
		}); err != nil {
			return fmt.Errorf("gateway %s did not answer: %w (%s)", public, err, where)
		}
	}
	// The pylons' URLs: a loopback port nothing listens on (probes, if any, fail fast).
	dead := "http://" + addr(2*c.Gateways)
	sim, err := controlplane.Start(ctx, controlplane.Options{
		Admins: admins, Token: controlPlaneToken, Pylons: c.Pylons, Period: c.Rate, FullInterval: c.FullInterval, Model: overheadModel, Baseline: c.Baseline,
		URL: func(i int) string { return dead + "/p" + strconv.Itoa(i) },
	})
	if err != nil {
		return err
	}
	defer sim.Stop()
	fmt.Fprintf(os.Stderr, "%d pylons heartbeating every %v to %d gateway(s): %v warm-up, then %v measured…\n", c.Pylons, c.Rate, c.Gateways, c.Warmup, c.Duration)
	if err := fleet.Sleep(ctx, c.Warmup); err != nil {
		return err
	}
	sentBefore, updatesBefore := make([]int64, len(admins)), make([]int64, len(admins))
	for g, st := range sim.Stats() {
		sentBefore[g], updatesBefore[g] = st.Accepted.Load(), st.Updates.Load()
	}
	profDone := make(chan error, 1)
	if c.Profile != "" {
		go func() { profDone <- saveCPUProfile(c.Profile, admins[0], controlPlaneToken, c.Duration) }()
	}
	cpuBefore, start := cpuTimes(procs), time.Now()
	if err := fleet.Sleep(ctx, c.Duration); err != nil {
		return err
	}
	cpuAfter, window := cpuTimes(procs), time.Since(start)
	if c.Profile != "" {
		if err := <-profDone; err != nil {
			fmt.Fprintf(os.Stderr, "profile: %v\n", err)
		}
	}
	fmt.Printf("%d simulated pylons, heartbeat every %v, full registration at least every %v, %d gateway(s); %v measured after %v of warm-up\n\n",
		c.Pylons, c.Rate, c.FullInterval, c.Gateways, window.Round(time.Millisecond), c.Warmup)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "gateway\theartbeats/s accepted\tof which load updates\tfailed (whole run)\tCPU, % of one core\tCPU per heartbeat")
	var failures int64
	for g, st := range sim.Stats() {
		accepted := st.Accepted.Load() - sentBefore[g]
		updates := "n/a"
		if accepted > 0 {
			updates = strconv.FormatFloat(100*float64(st.Updates.Load()-updatesBefore[g])/float64(accepted), 'f', 0, 64) + " %"
		}
		failures += st.Failed.Load()
		rate := float64(accepted) / window.Seconds()
		if cpuBefore[g] < 0 || cpuAfter[g] < 0 {
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%d\tn/a\tn/a\n", specs[g].Name, rate, updates, st.Failed.Load())
			continue
		}
		cpu := cpuAfter[g] - cpuBefore[g]
		per := "n/a"
		if accepted > 0 {
			per = strconv.FormatFloat(float64(cpu)/float64(time.Microsecond)/float64(accepted), 'f', 1, 64) + " µs"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%d\t%.1f %%\t%s\n", specs[g].Name, rate, updates, st.Failed.Load(), 100*cpu.Seconds()/window.Seconds(), per)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println("\n(CPU: user + system time of the whole gateway process over the window, /proc/PID/stat, 10 ms ticks; " +
		"with no client traffic it is the heartbeats' work: reading them, parsing, validation, the backend actors' updates, the answers)")
	if failures > 0 {
		msg := ""
		for _, st := range sim.Stats() {
			if p := st.FirstErr.Load(); p != nil {
				msg = *p
				break
			}
		}
		return fmt.Errorf("%d heartbeats failed, the first: %s (%s)", failures, msg, where)
	}
	return nil
}

// saveCPUProfile saves a CPU profile of the gateway on admin (control token token, "" for
// none) over d in dir.
func saveCPUProfile(dir, admin, token string, d time.Duration) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + admin + "/debug/pprof/profile?seconds=" + strconv.Itoa(max(int(d.Seconds()), 1)))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if err := fasthttp.DoTimeout(req, resp, d+30*time.Second); err != nil {
		return err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode(), resp.Body())
	}
	return os.WriteFile(filepath.Join(dir, "gateway-cpu.pprof"), resp.Body(), 0o600)
}

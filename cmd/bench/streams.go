package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/bench/streams"
)

// streamsCmd holds N long streams open at once through one gateway and one pylon to the
// mock engine and reports errors, time to first byte and each process's resident memory
// per open stream.
type streamsCmd struct {
	N            int           `name:"n" default:"2000" help:"Streams open at once."`
	Duration     time.Duration `default:"30s" help:"Length of each stream: the engine sends --tokens tokens spread over it."`
	Tokens       int           `default:"15" help:"Tokens per stream (one event each; the token delay is --duration / --tokens)."`
	Opening      int           `default:"32" help:"Streams being opened at once (dialled, not yet answered)."`
	Hold         time.Duration `default:"3s" help:"How long memory is sampled (every 250 ms) once every stream is open; the peak is reported. Must end before the first stream does."`
	BinDir       string        `name:"bin-dir" default:"bin" help:"Directory holding the engine, pylon and gateway binaries."`
	ReadyTimeout time.Duration `name:"ready-timeout" default:"20s" help:"How long the fleet may take to become routable."`
	Logs         string        `placeholder:"DIR" help:"Keep the children's logs in DIR (default: a temporary directory, removed)."`
}

func (c *streamsCmd) Validate() error {
	if c.N <= 0 || c.Tokens <= 0 || c.Opening <= 0 || c.Duration <= 0 || c.Hold <= 0 {
		return errors.New("--n, --tokens, --opening, --duration and --hold must be > 0")
	}
	return nil
}

// fdsPerStream is the file descriptors one stream takes in the busiest process (the
// gateway and the pylon each hold a client connection and an upstream connection).
const fdsPerStream = 2

func (c *streamsCmd) Run() error {
	ctx, stop := signalContext()
	defer stop()
	bins := fleet.BinariesIn(c.BinDir)
	if err := bins.Check(); err != nil {
		return err
	}
	if err := raiseNoFile(uint64(fdsPerStream*c.N + 1024)); err != nil { //nolint:gosec // c.N > 0
		return err
	}
	logs, err := logDir(c.Logs, "switchyard-streams-")
	if err != nil {
		return err
	}
	if c.Logs == "" {
		defer os.RemoveAll(logs)
	}
	ports, err := fleet.FreePorts(ctx, 5)
	if err != nil {
		return err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	engine, pylon, gateway, gatewayAdmin, pylonAdmin := addr(0), addr(1), addr(2), addr(3), addr(4)
	delay := c.Duration / time.Duration(c.Tokens)
	// No connection caps: the run is about how many streams fit.
	specs := []fleet.Spec{
		{Name: "gateway", Path: bins.Gateway, Args: []string{
			"--http-listen-addr", gateway, "--admin-listen-addr", gatewayAdmin, "--max-connections", "0", "--log-level", "warn",
		}},
		{Name: "pylon", Path: bins.Pylon, Args: []string{
			"--http-listen-addr", pylon, "--admin-listen-addr", pylonAdmin, "--upstream-http-base-url", "http://" + engine, "--model-name", overheadModel,
			"--gateway", "http://" + gatewayAdmin, "--inference-server-id", "streams", "--initial-input-tps", "100000",
			"--engine-stats-stream", "off", "--max-connections", "0", "--log-level", "warn",
		}},
		{Name: "engine", Path: bins.Engine, Args: []string{
			"--http-listen-addr", engine, "--num-tokens", strconv.Itoa(c.Tokens), "--token-delay", delay.String(),
			"--max-connections", "0", "--log-level", "warn",
		}},
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
	before := rssOf(procs)
	fmt.Fprintf(os.Stderr, "opening %d streams of %v (%d at a time)…\n", c.N, c.Duration, c.Opening)
	var peak []int64
	var openAtEnd int
	res, err := streams.Run(ctx, streams.Options{
		Addr: gateway, Model: overheadModel, N: c.N, Opening: c.Opening, Timeout: c.Duration + 30*time.Second,
	}, func(open func() int) {
		peak = rssOf(procs)
		deadline := time.Now().Add(c.Hold)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(250 * time.Millisecond)
			for i, r := range rssOf(procs) {
				peak[i] = max(peak[i], r)
			}
		}
		openAtEnd = open()
	})
	if err != nil {
		return err
	}
	if err := writeStreams(os.Stdout, c, res, specs, before, peak, openAtEnd); err != nil {
		return err
	}
	if n := res.ErrorCount(); n > 0 {
		return fmt.Errorf("%d of %d streams failed (logs in %s; use --logs DIR to keep them)", n, c.N, logs)
	}
	return nil
}

// logDir is dir (created), or a new temporary directory named after prefix when dir is "".
func logDir(dir, prefix string) (string, error) {
	if dir == "" {
		return os.MkdirTemp("", prefix) //nolint:wrapcheck // names the directory
	}
	return dir, os.MkdirAll(dir, 0o750) //nolint:wrapcheck // names the directory
}

// rssOf reads each process's resident memory (-1 where it cannot be read).
func rssOf(procs []*fleet.Proc) []int64 {
	out := make([]int64, len(procs))
	for i, p := range procs {
		r, err := fleet.RSS(p.PID())
		if err != nil {
			r = -1
		}
		out[i] = r
	}
	return out
}

func writeStreams(w io.Writer, c *streamsCmd, res *streams.Result, specs []fleet.Spec, before, peak []int64, openAtEnd int) error {
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	}
	fmt.Fprintf(w, "%d streams of %v (%d tokens), opened %d at a time: all answered after %.1f s; %d ok, %d failed",
		c.N, c.Duration, c.Tokens, c.Opening, res.AllOpen.Seconds(), res.OK, res.ErrorCount())
	if len(res.Errors) > 0 {
		kinds := make([]string, 0, len(res.Errors))
		for k := range res.Errors {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		sep := " ("
		for _, k := range kinds {
			fmt.Fprintf(w, "%s%s: %d", sep, k, res.Errors[k])
			sep = ", "
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintf(w, "\ntime to first byte (dial to the answer's first byte): p50 %s, p99 %s, max %s\n", ms(res.Quantile(0.5)), ms(res.Quantile(0.99)), ms(res.Quantile(1)))
	fmt.Fprintf(w, "streams still open at the end of the memory sampling: %d\n\n", openAtEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "process\tRSS before\tRSS with all open (peak)\tper open stream")
	mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }
	for i, sp := range specs {
		if before[i] < 0 || peak == nil || peak[i] < 0 {
			fmt.Fprintf(tw, "%s\tn/a\tn/a\tn/a\n", sp.Name)
			continue
		}
		per := float64(peak[i]-before[i]) / float64(c.N) / 1000
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f KB\n", sp.Name, mib(before[i]), mib(peak[i]), per)
	}
	return tw.Flush() //nolint:wrapcheck // the writer's own error
}

// raiseNoFile raises this process's open-file limit (soft and, when allowed, hard) to at
// least need; the fleet's children inherit it. It fails when the hard limit is lower and
// cannot be raised.
func raiseNoFile(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read the open-file limit: %w", err)
	}
	if lim.Cur >= need {
		return nil
	}
	want := lim
	want.Cur = need
	want.Max = max(lim.Max, need)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		if lim.Max < need {
			return fmt.Errorf("%d streams need an open-file limit of at least %d; the hard limit is %d and cannot be raised (%w): "+
				"raise it (ulimit -Hn, or run as root) or open fewer streams", (need-1024)/fdsPerStream, need, lim.Max, err)
		}
		return fmt.Errorf("raise the open-file limit to %d: %w", need, err)
	}
	return nil
}

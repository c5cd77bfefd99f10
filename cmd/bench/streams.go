package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

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
	Profile      string        `placeholder:"DIR" help:"Run the gateway and the pylon with --enable-pprof and save their heap and goroutine profiles, taken at the end of the memory sampling, in DIR (go tool pprof DIR/gateway-heap.pprof, DIR/pylon-heap.pprof)."`
}

func (c *streamsCmd) Validate() error {
	if c.N <= 0 || c.Tokens <= 0 || c.Opening <= 0 || c.Duration <= 0 || c.Hold <= 0 {
		return errors.New("--n, --tokens, --opening, --duration and --hold must be > 0")
	}
	return nil
}

// fdsPerStream is the file descriptors one stream takes in the busiest process (the
// gateway and the pylon each hold a client connection and an upstream connection);
// fdsSpare covers each process's listeners, logs, probes and registrations.
const (
	fdsPerStream = 2
	fdsSpare     = 64
)

func (c *streamsCmd) Run() error {
	ctx, stop := signalContext()
	defer stop()
	bins := fleet.BinariesIn(c.BinDir)
	if err := bins.Check(); err != nil {
		return err
	}
	if err := raiseNoFile(uint64(fdsPerStream*c.N + fdsSpare)); err != nil { //nolint:gosec // c.N > 0
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
			"--engine-stats-stream", "off", "--max-connections", "0", "--active-canary-interval", "0", "--log-level", "warn",
		}},
		{Name: "engine", Path: bins.Engine, Args: []string{
			"--http-listen-addr", engine, "--num-tokens", strconv.Itoa(c.Tokens), "--token-delay", delay.String(),
			"--max-connections", "0", "--log-level", "warn",
		}},
	}
	if c.Profile != "" {
		if err := os.MkdirAll(c.Profile, 0o750); err != nil {
			return err
		}
		specs[0].Args = append(specs[0].Args, "--enable-pprof")
		specs[1].Args = append(specs[1].Args, "--enable-pprof")
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
	admins := []string{gatewayAdmin, pylonAdmin, ""} // in the specs' order
	before, goBefore := rssOf(procs), goMemOf(admins)
	fmt.Fprintf(os.Stderr, "opening %d streams of %v (%d at a time)…\n", c.N, c.Duration, c.Opening)
	var peak []int64
	var goPeak [][2]int64
	var openAtStart, openAtEnd int
	res, err := streams.Run(ctx, streams.Options{
		Addr: gateway, Model: overheadModel, N: c.N, Opening: c.Opening, Timeout: c.Duration + 30*time.Second,
	}, func(open func() int) {
		peak, openAtStart = rssOf(procs), open()
		deadline := time.Now().Add(c.Hold)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(250 * time.Millisecond)
			for i, r := range rssOf(procs) {
				peak[i] = max(peak[i], r)
			}
		}
		openAtEnd, goPeak = open(), goMemOf(admins)
		if c.Profile != "" {
			saveProfiles(c.Profile, "gateway", gatewayAdmin)
			saveProfiles(c.Profile, "pylon", pylonAdmin)
		}
	})
	if err != nil {
		return err
	}
	if err := writeStreams(os.Stdout, c, res, specs, [2][]int64{before, peak}, [2][][2]int64{goBefore, goPeak}, openAtStart, openAtEnd); err != nil {
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

// writeStreams prints the run: rss holds each process's RSS before and at its peak, goMem
// its Go heap and stacks before and at the end of the sampling.
func writeStreams(w io.Writer, c *streamsCmd, res *streams.Result, specs []fleet.Spec, rss [2][]int64, goMem [2][][2]int64, openAtStart, openAtEnd int) error {
	before, peak := rss[0], rss[1]
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
	for _, k := range slices.Sorted(maps.Keys(res.Samples)) {
		fmt.Fprintf(w, "\nfirst %s answer: %q", k, res.Samples[k])
	}
	fmt.Fprintf(w, "\ntime to first byte (dial to the answer's first byte): p50 %s, p99 %s, max %s\n", ms(res.Quantile(0.5)), ms(res.Quantile(0.99)), ms(res.Quantile(1)))
	fmt.Fprintf(w, "streams open when the memory sampling began: %d, when it ended: %d\n\n", openAtStart, openAtEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "process\tRSS before\tRSS with all open (peak)\tper open stream\tof which Go heap\tof which goroutine stacks")
	mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }
	for i, sp := range specs {
		if before[i] < 0 || peak == nil || peak[i] < 0 {
			fmt.Fprintf(tw, "%s\tn/a\tn/a\tn/a\n", sp.Name)
			continue
		}
		perStream := func(b, a int64) string {
			return strconv.FormatFloat(float64(a-b)/float64(max(openAtStart, 1))/1000, 'f', 1, 64) + " KB"
		}
		heap, stacks := "n/a", "n/a"
		if gb, ga := goMem[0][i], goMem[1]; ga != nil && gb[0] >= 0 && ga[i][0] >= 0 {
			heap, stacks = perStream(gb[0], ga[i][0]), perStream(gb[1], ga[i][1])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sp.Name, mib(before[i]), mib(peak[i]), perStream(before[i], peak[i]), heap, stacks)
	}
	if err := tw.Flush(); err != nil {
		return err //nolint:wrapcheck // the writer's own error
	}
	_, err := fmt.Fprintln(w, "\n(KB = 1000 bytes; the Go heap and stacks are the processes' own go_memstats_heap_inuse_bytes and "+
		"go_memstats_stack_inuse_bytes at the end of the sampling, the rest of RSS is the runtime's other memory and the binary)")
	return err //nolint:wrapcheck // the writer's own error
}

// goMemOf scrapes each admin listener's /metrics for the Go heap in use and the goroutine
// stacks (-1 where there is no admin listener or the scrape fails).
func goMemOf(admins []string) [][2]int64 {
	out := make([][2]int64, len(admins))
	for i, a := range admins {
		out[i] = [2]int64{-1, -1}
		if a == "" {
			continue
		}
		status, body, err := fasthttp.GetTimeout(nil, "http://"+a+"/metrics", 5*time.Second)
		if err != nil || status != fasthttp.StatusOK {
			continue
		}
		for _, line := range strings.Split(string(body), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				continue
			}
			switch f[0] {
			case "go_memstats_heap_inuse_bytes":
				out[i][0] = int64(v)
			case "go_memstats_stack_inuse_bytes":
				out[i][1] = int64(v)
			}
		}
	}
	return out
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
				"raise it (ulimit -Hn, or run as root) or open fewer streams", (need-fdsSpare)/fdsPerStream, need, lim.Max, err)
		}
		return fmt.Errorf("raise the open-file limit to %d: %w", need, err)
	}
	return nil
}

// saveProfiles saves a process's heap and goroutine profiles in dir as NAME-heap.pprof and
// NAME-goroutine.pprof, from its admin listener (reporting failures on stderr: the
// measurement goes on without them).
func saveProfiles(dir, name, admin string) {
	for _, p := range []struct{ file, path string }{
		{name + "-heap.pprof", "/debug/pprof/heap?gc=1"}, {name + "-goroutine.pprof", "/debug/pprof/goroutine"},
	} {
		status, body, err := fasthttp.GetTimeout(nil, "http://"+admin+p.path, 30*time.Second)
		if err == nil && status != fasthttp.StatusOK {
			err = fmt.Errorf("status %d", status)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, p.file), body, 0o600)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "profile %s: %v\n", p.path, err)
		}
	}
}

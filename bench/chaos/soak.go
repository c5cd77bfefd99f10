package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
)

// SoakOptions configure a soak run.
type SoakOptions struct {
	Bin fleet.Binaries
	// Duration is how long the load runs (default 10 minutes).
	Duration time.Duration
	// FaultEvery is the time between two injected faults (default 30 s).
	FaultEvery time.Duration
	// SampleEvery is the time between two samples of heap and goroutines (default 30 s).
	SampleEvery time.Duration
	// WarmUp is left out of the heap growth budget (default 1 minute).
	WarmUp time.Duration
	// Clients is the number of concurrent clients, each serial (default 4).
	Clients int
	// LogDir keeps the children's logs; "" uses a temporary folder removed at the end.
	LogDir string
	// Out receives a line per sample and per fault as they happen (nil: discarded).
	Out io.Writer
}

func (o *SoakOptions) defaults() {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Minute
	}
	if o.FaultEvery <= 0 {
		o.FaultEvery = 30 * time.Second
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 30 * time.Second
	}
	if o.WarmUp < 0 {
		o.WarmUp = 0
	} else if o.WarmUp == 0 {
		o.WarmUp = time.Minute
	}
	if o.Clients <= 0 {
		o.Clients = 4
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// soakHangBound is the soak's hang bound: longer than any fault it injects lasts (a
// freeze of soakFreeze, an engine hang of soakInjectFor), so a request delayed by a fault
// still gets its answer and only a request that never gets one counts as unanswered.
const soakHangBound = 30 * time.Second

// Fault durations of the soak.
const (
	soakRestartAfter = time.Second     // between a kill -9 and the restart
	soakFreeze       = 5 * time.Second // SIGSTOP length
	soakInjectFor    = 3 * time.Second // how long an engine fault injection stays on
)

// soakProcs are the processes the soak samples.
var soakProcs = []string{GatewayName, PylonName(0), PylonName(1)}

// ProcSample is one process's heap, goroutines and RSS at a sample (< 0: unknown).
type ProcSample struct {
	Name                  string
	Heap, Goroutines, RSS int64
}

// SoakSample is one sample of the soak.
type SoakSample struct {
	At           time.Duration
	Sent, Failed int
	Procs        []ProcSample
}

// FaultEvent is one injected fault.
type FaultEvent struct {
	At   time.Duration
	What string
	// Err is why the fault could not be injected ("" when it was).
	Err string
}

// SoakReport is a soak run's results.
type SoakReport struct {
	Options    SoakOptions
	Samples    []SoakSample
	Faults     []FaultEvent
	Accounting Accounting
	Load       LoadStats
	// GatewayRequests is the gateway's own count of finished requests (requests_total), -1
	// when unreadable.
	GatewayRequests float64
	// Baseline and Final are each sampled process's goroutines before the load and after
	// it stopped (-1: unknown).
	Baseline, Final map[string]int
	Checks          []Check
	PIDs            []int
	Err             error
}

// Passed reports whether the soak ran to its end within every budget.
func (r *SoakReport) Passed() bool {
	if r.Err != nil {
		return false
	}
	for _, c := range r.Checks {
		if !c.Pass {
			return false
		}
	}
	return len(r.Checks) > 0
}

// Soak runs a soak: a fleet under a mixed load of o.Clients clients for o.Duration, a
// fault every o.FaultEvery, a sample every o.SampleEvery, then the budgets. It returns an
// error only when it cannot start; anything later is in the report. Every child has
// exited when it returns.
func Soak(ctx context.Context, o SoakOptions) (*SoakReport, error) {
	o.defaults()
	if err := o.Bin.Check(); err != nil {
		return nil, err //nolint:wrapcheck // names the binaries
	}
	logDir := o.LogDir
	if logDir == "" {
		var err error
		if logDir, err = os.MkdirTemp("", "switchyard-soak-"); err != nil {
			return nil, err //nolint:wrapcheck // names the folder
		}
		defer os.RemoveAll(logDir)
	}
	features := DetectFeatures(ctx, o.Bin)
	rep := &SoakReport{Options: o, GatewayRequests: -1, Baseline: map[string]int{}, Final: map[string]int{}}
	// Bounded whatever happens: the load, the faults and the settling.
	ctx, cancel := context.WithTimeout(ctx, o.Duration+3*time.Minute)
	defer cancel()
	f, err := StartFleet(ctx, FleetConfig{Bin: o.Bin, Features: features, LogDir: logDir, GatewayArgs: soakGatewayArgs(features)})
	if err != nil {
		return nil, fmt.Errorf("fleet did not start: %w", err)
	}
	defer func() {
		f.Stop()
		rep.PIDs = f.PIDs()
	}()
	s := &soak{o: o, f: f, features: features, start: time.Now()}
	first := s.sample(ctx, nil)
	for _, p := range first.Procs {
		rep.Baseline[p.Name] = int(p.Goroutines)
	}
	fmt.Fprintf(o.Out, "soak: %v of load from %d clients, a fault every %v, a sample every %v (heap after warm-up %v; logs in %s)\n",
		o.Duration, o.Clients, o.FaultEvery, o.SampleEvery, o.WarmUp, logDir)
	s.printSample(first)
	c := NewClient(f.GatewayURL, 2*o.Clients)
	load := StartLoad(ctx, c, o.Clients, 20*time.Millisecond, soakHangBound, MixedRequest)
	s.start = time.Now()
	rep.Err = s.run(ctx, load)
	rep.Samples, rep.Faults = s.samples, s.faults
	results := load.Stop()
	rep.Accounting = load.Ledger().Accounting()
	rep.Load = Summarize(results, time.Time{})
	c.Close()
	if rep.Err == nil {
		rep.Err = ctx.Err()
	}
	if ss, err := f.Metrics(ctx, f.AdminURL); err == nil {
		rep.GatewayRequests, _ = Sum(ss, metricPrefix+"requests_total", nil)
	}
	// Goroutines back to baseline: poll for a bounded time once the load has stopped.
	settleBy := time.Now().Add(SoakSettle)
	for {
		settled := true
		for _, p := range s.sample(ctx, nil).Procs {
			rep.Final[p.Name] = int(p.Goroutines)
			if !GoroutineCheck(p.Name, rep.Baseline[p.Name], int(p.Goroutines), SoakGoroutineSlack, SoakGoroutineSlackFraction).Pass {
				settled = false
			}
		}
		if settled || time.Now().After(settleBy) || fleet.Sleep(ctx, 500*time.Millisecond) != nil {
			break
		}
	}
	rep.Checks = soakChecks(rep, o.WarmUp)
	return rep, nil
}

// soakGatewayArgs turns on the gateway's profiles when it has them: the soak forces a
// collection through them before reading the heap.
func soakGatewayArgs(f Features) []string {
	if f.GatewayPprof {
		return []string{"--enable-pprof"}
	}
	return nil
}

// soakChecks evaluates the soak's budgets on a finished report.
func soakChecks(rep *SoakReport, warmUp time.Duration) []Check {
	checks := make([]Check, 0, 2+len(soakProcs))
	checks = append(checks, BalancedCheck(rep.Accounting))
	first, last := -1.0, -1.0
	for _, s := range rep.Samples {
		if s.At < warmUp || len(s.Procs) == 0 {
			continue
		}
		if h := s.Procs[0].Heap; h >= 0 {
			if first < 0 {
				first = float64(h)
			}
			last = float64(h)
		}
	}
	checks = append(checks, HeapGrowthCheck(GatewayName, first, last, SoakMaxHeapGrowth))
	for _, n := range soakProcs {
		base, ok := rep.Baseline[n]
		end, ok2 := rep.Final[n]
		if !ok || !ok2 {
			base, end = -1, -1
		}
		checks = append(checks, GoroutineCheck(n, base, end, SoakGoroutineSlack, SoakGoroutineSlackFraction))
	}
	return checks
}

type soak struct {
	o        SoakOptions
	f        *Fleet
	features Features
	start    time.Time
	mu       sync.Mutex
	samples  []SoakSample
	faults   []FaultEvent
}

// run drives the faults and the samples until the duration has passed.
func (s *soak) run(ctx context.Context, load *Load) error {
	end := s.start.Add(s.o.Duration)
	nextFault, nextSample := s.start.Add(s.o.FaultEvery), s.start.Add(s.o.SampleEvery)
	var faultWG sync.WaitGroup
	defer faultWG.Wait()
	faultBusy := make(chan struct{}, 1)
	for i := 0; ; {
		now := time.Now()
		if !now.Before(end) {
			sm := s.sample(ctx, load)
			s.printSample(sm)
			s.mu.Lock()
			s.samples = append(s.samples, sm)
			s.mu.Unlock()
			return nil
		}
		if !now.Before(nextSample) {
			sm := s.sample(ctx, load)
			s.printSample(sm)
			s.mu.Lock()
			s.samples = append(s.samples, sm)
			s.mu.Unlock()
			nextSample = nextSample.Add(s.o.SampleEvery)
		}
		if !now.Before(nextFault) && nextFault.Before(end.Add(-soakFreeze)) {
			select {
			case faultBusy <- struct{}{}:
				n := i
				i++
				faultWG.Go(func() {
					defer func() { <-faultBusy }()
					s.inject(ctx, n)
				})
			default: // the last fault is still on: skip this one
			}
			nextFault = nextFault.Add(s.o.FaultEvery)
		}
		wait := min(time.Until(nextSample), time.Until(nextFault), time.Until(end))
		if err := fleet.Sleep(ctx, max(wait, 10*time.Millisecond)); err != nil {
			return err
		}
	}
}

// injections are the engine fault injections the soak rotates through.
var injections = []string{`{"fail_fraction":0.5}`, `{"drop_after_tokens":2}`, `{"delay_ms":300}`, `{"hang":true}`}

// inject applies the n-th fault of the rotation and waits until it is over (the process
// restarted, resumed, or the injection cleared).
func (s *soak) inject(ctx context.Context, n int) {
	at := time.Since(s.start)
	backend := (n / 4) % Backends
	var what string
	var err error
	switch n % 4 {
	case 0, 1:
		name := PylonName(backend)
		if n%4 == 1 {
			name = EngineName(backend)
		}
		what = "kill -9 " + name + ", restart after " + soakRestartAfter.String()
		if err = s.f.Kill(name); err == nil {
			_ = fleet.Sleep(ctx, soakRestartAfter)
			err = s.f.Restart(name)
		}
	case 2:
		name := PylonName(backend)
		what = "SIGSTOP " + name + " for " + soakFreeze.String()
		if err = s.f.Signal(name, syscall.SIGSTOP); err == nil {
			_ = fleet.Sleep(ctx, soakFreeze)
			err = s.f.Signal(name, syscall.SIGCONT)
		}
	default:
		body := injections[(n/4)%len(injections)]
		what = "engine fault injection on " + EngineName(backend) + " for " + soakInjectFor.String() + ": " + body
		if !s.features.EngineTestControl {
			err = errors.New("the engine has no --enable-test-control")
			break
		}
		if err = s.f.EngineControl(ctx, backend, body); err == nil {
			_ = fleet.Sleep(ctx, soakInjectFor)
			err = s.f.EngineControl(context.WithoutCancel(ctx), backend, "{}")
		}
	}
	ev := FaultEvent{At: at, What: what}
	if err != nil {
		ev.Err = oneLine(err.Error())
	}
	s.mu.Lock()
	s.faults = append(s.faults, ev)
	s.mu.Unlock()
	line := fmt.Sprintf("  %6s  fault: %s", fmtAt(at), what)
	if ev.Err != "" {
		line += " (not injected: " + ev.Err + ")"
	}
	fmt.Fprintln(s.o.Out, line)
}

// sample reads heap, goroutines and RSS of the gateway and the pylons, and the load's
// counts so far (load may be nil). The gateway's heap is read after a forced collection
// when it serves profiles.
func (s *soak) sample(ctx context.Context, load *Load) SoakSample {
	sm := SoakSample{At: time.Since(s.start)}
	if load != nil {
		for _, r := range load.Ledger().Results() {
			sm.Sent++
			if r.Kind.Failed() {
				sm.Failed++
			}
		}
		sm.Sent += load.Ledger().Accounting().Lost // in flight
	}
	if s.features.GatewayPprof {
		_ = s.f.ForceGC(ctx)
	}
	admins := []string{s.f.AdminURL, s.f.PylonAdmin[0], s.f.PylonAdmin[1]}
	for i, name := range soakProcs {
		p := ProcSample{Name: name, Heap: -1, Goroutines: -1, RSS: s.f.RSS(name)}
		if ss, err := s.f.Metrics(ctx, admins[i]); err == nil {
			if v, ok := Sum(ss, "go_memstats_heap_inuse_bytes", nil); ok {
				p.Heap = int64(v)
			}
			if v, ok := Sum(ss, "go_goroutines", nil); ok {
				p.Goroutines = int64(v)
			}
		}
		sm.Procs = append(sm.Procs, p)
	}
	return sm
}

func fmtAt(d time.Duration) string { return strconv.Itoa(int(d.Round(time.Second).Seconds())) + "s" }

func (s *soak) printSample(sm SoakSample) {
	fmt.Fprintln(s.o.Out, formatSample(sm))
}

// formatSample renders one sample line.
func formatSample(sm SoakSample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %6s  sent %6d  failed %5d", fmtAt(sm.At), sm.Sent, sm.Failed)
	for _, p := range sm.Procs {
		fmt.Fprintf(&b, " | %s heap %s gor %s rss %s", p.Name, mibOr(p.Heap), intOr(p.Goroutines), mibOr(p.RSS))
	}
	return b.String()
}

func mibOr(v int64) string {
	if v < 0 {
		return "?"
	}
	return mib(v)
}

func intOr(v int64) string {
	if v < 0 {
		return "?"
	}
	return strconv.FormatInt(v, 10)
}

// WriteSoak writes a soak report: the samples, the faults, the outcomes and the checks;
// as markdown when markdown is set.
func WriteSoak(w io.Writer, rep *SoakReport, markdown bool) error {
	bullet, code := "  ", ""
	if markdown {
		bullet, code = "- ", "```"
		fmt.Fprintf(w, "# bench soak (%v, %d clients, a fault every %v)\n\n## Samples\n\n%s\n", rep.Options.Duration, rep.Options.Clients, rep.Options.FaultEvery, code)
	} else {
		fmt.Fprintln(w, "\nsamples:")
	}
	for _, sm := range rep.Samples {
		fmt.Fprintln(w, formatSample(sm))
	}
	if markdown {
		fmt.Fprintf(w, "%s\n\n## Faults\n\n", code)
	} else {
		fmt.Fprintln(w, "\nfaults:")
	}
	for _, ev := range rep.Faults {
		line := fmtAt(ev.At) + ": " + ev.What
		if ev.Err != "" {
			line += " (not injected: " + ev.Err + ")"
		}
		fmt.Fprintln(w, bullet+line)
	}
	if markdown {
		fmt.Fprint(w, "\n## Outcomes\n\n")
	} else {
		fmt.Fprintln(w, "\noutcomes:")
	}
	var kinds []string
	for k := KindOK; k <= KindAborted; k++ {
		if n := rep.Load.ByKind[k]; n > 0 {
			kinds = append(kinds, k.String()+" "+strconv.Itoa(n))
		}
	}
	fmt.Fprintf(w, "%srequests sent %d: %s\n", bullet, rep.Accounting.Sent, strings.Join(kinds, ", "))
	fmt.Fprintf(w, "%s%s\n", bullet, rep.Accounting)
	if len(rep.Load.Examples) > 0 {
		fmt.Fprintf(w, "%sfailures, e.g.: %s\n", bullet, strings.Join(rep.Load.Examples, "; "))
	}
	if rep.GatewayRequests >= 0 {
		fmt.Fprintf(w, "%sthe gateway's requests_total: %.0f (it does not count requests cancelled before routing)\n", bullet, rep.GatewayRequests)
	}
	if markdown {
		fmt.Fprint(w, "\n## Budgets\n\n")
	} else {
		fmt.Fprintln(w, "\nbudgets:")
	}
	if rep.Err != nil {
		fmt.Fprintf(w, "%sERROR: %s\n", bullet, oneLine(rep.Err.Error()))
	}
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "%s%s\n", bullet, c)
	}
	verdict := "soak within budget"
	if !rep.Passed() {
		verdict = "soak missed a budget"
	}
	if markdown {
		verdict = "\n**" + verdict + "**"
	}
	_, err := fmt.Fprintln(w, verdict)
	return err //nolint:wrapcheck // the writer's own error
}

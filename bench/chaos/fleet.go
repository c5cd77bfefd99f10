package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
)

// Model is the model name every engine of the fleet serves.
const Model = "chaos-model"

// Backends is the number of backends (engine + pylon pairs) of the fleet.
const Backends = 2

// GatewayName is the gateway's process name.
const GatewayName = "gateway"

// PylonName is backend i's pylon process name.
func PylonName(i int) string { return "pylon-" + strconv.Itoa(i) }

// EngineName is backend i's engine process name.
func EngineName(i int) string { return "engine-" + strconv.Itoa(i) }

// BackendID is backend i's id (its pylon's --inference-server-id).
func BackendID(i int) string { return "b" + strconv.Itoa(i) }

// ProcNames are the fleet's processes in table order.
var ProcNames = []string{GatewayName, PylonName(0), PylonName(1), EngineName(0), EngineName(1)}

// stopGrace is how long a fleet process gets after SIGTERM at the end of a scenario.
const stopGrace = 2 * time.Second

// Engine timing: load requests generate engineTokens tokens, engineTokenDelay apart.
const (
	engineTokens     = 8
	engineTokenDelay = 5 * time.Millisecond
)

// Features are what the binaries on hand support, read from their --help: the suite
// adapts to binaries with and without the fixes it measures.
type Features struct {
	// ReadHeaderTimeoutFlag is the gateway's read-header-timeout flag ("" when none);
	// ReadHeaderTimeoutMs says it takes milliseconds rather than a duration.
	ReadHeaderTimeoutFlag string
	ReadHeaderTimeoutMs   bool
	// EngineTestControl says the engine has --enable-test-control (fault injection).
	EngineTestControl bool
	// GatewayPprof says the gateway has --enable-pprof (the soak forces a collection
	// through it before reading the heap).
	GatewayPprof bool
	// GatewayWriteTimeout says the gateway has --write-timeout.
	GatewayWriteTimeout bool
}

var readHeaderFlag = regexp.MustCompile(`--read-header-timeout(-ms)?\b`)

// ParseFeatures reads the features from the gateway's and the engine's --help texts.
func ParseFeatures(gatewayHelp, engineHelp string) Features {
	var f Features
	if m := readHeaderFlag.FindStringSubmatch(gatewayHelp); m != nil {
		f.ReadHeaderTimeoutFlag = m[0]
		f.ReadHeaderTimeoutMs = m[1] != ""
	}
	f.EngineTestControl = strings.Contains(engineHelp, "--enable-test-control")
	f.GatewayPprof = strings.Contains(gatewayHelp, "--enable-pprof")
	f.GatewayWriteTimeout = strings.Contains(gatewayHelp, "--write-timeout")
	return f
}

// ReadHeaderTimeoutArg is the gateway argument that sets its read-header timeout to d,
// "" when the gateway has no such flag.
func (f Features) ReadHeaderTimeoutArg(d time.Duration) string {
	switch {
	case f.ReadHeaderTimeoutFlag == "":
		return ""
	case f.ReadHeaderTimeoutMs:
		return f.ReadHeaderTimeoutFlag + "=" + strconv.FormatInt(d.Milliseconds(), 10)
	default:
		return f.ReadHeaderTimeoutFlag + "=" + d.String()
	}
}

// DetectFeatures runs the gateway's and the engine's --help (5 s each at most).
func DetectFeatures(ctx context.Context, bins fleet.Binaries) Features {
	help := func(path string) string {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, path, "--help").CombinedOutput()
		return string(out)
	}
	return ParseFeatures(help(bins.Gateway), help(bins.Engine))
}

// FleetConfig configures a chaos fleet.
type FleetConfig struct {
	Bin      fleet.Binaries
	Features Features
	// LogDir receives one log per process (appended to across restarts).
	LogDir string
	// GatewayArgs are added to the gateway's command line.
	GatewayArgs []string
	// ReadyTimeout bounds the wait until both backends are routable (default 20 s).
	ReadyTimeout time.Duration
}

// Fleet is a running 2-backend fleet: engine-i behind pylon-i (backend bi), both pylons
// registered with the one gateway.
type Fleet struct {
	cfg   FleetConfig
	group fleet.Group
	mu    sync.Mutex
	procs map[string]*fleet.Proc
	specs map[string]fleet.Spec
	pids  []int
	// GatewayURL is the public base URL, AdminURL the admin listener's.
	GatewayURL, AdminURL string
	// GatewayAddr is the public host:port.
	GatewayAddr string
	// PylonURLs and EngineURLs are the backends' data URLs, PylonAdmin the pylons' admin
	// URLs, by backend index.
	PylonURLs, PylonAdmin, EngineURLs []string
	hc                                *http.Client
}

func loopbackClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 4}}
}

// StartFleet starts the engines and the gateway, waits until they answer, starts the
// pylons and waits until the gateway routes to both backends. On error everything
// started is stopped.
func StartFleet(ctx context.Context, cfg FleetConfig) (f *Fleet, err error) {
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 20 * time.Second
	}
	ports, err := fleet.FreePorts(ctx, 2+3*Backends) // the gateway's two, then engine, pylon and pylon admin per backend
	if err != nil {
		return nil, err //nolint:wrapcheck // says what failed
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	f = &Fleet{cfg: cfg, procs: map[string]*fleet.Proc{}, specs: map[string]fleet.Spec{}, hc: loopbackClient(2 * time.Second)}
	defer func() {
		if err != nil {
			f.Stop()
			f = nil
		}
	}()
	f.GatewayAddr = addr(0)
	f.GatewayURL, f.AdminURL = "http://"+addr(0), "http://"+addr(1)
	gwArgs := append([]string{"--http-listen-addr=" + addr(0), "--admin-listen-addr=" + addr(1), "--log-level=warn"}, cfg.GatewayArgs...)
	var engines, pylons []fleet.Spec
	for i := range Backends {
		engine, pylon, pylonAdmin := addr(2+3*i), addr(3+3*i), addr(4+3*i)
		f.EngineURLs = append(f.EngineURLs, "http://"+engine)
		f.PylonURLs = append(f.PylonURLs, "http://"+pylon)
		f.PylonAdmin = append(f.PylonAdmin, "http://"+pylonAdmin)
		eArgs := []string{
			"--http-listen-addr=" + engine, "--model-name=" + Model, "--num-tokens=" + strconv.Itoa(engineTokens),
			"--token-delay-ms=" + strconv.FormatInt(engineTokenDelay.Milliseconds(), 10), "--seed=" + strconv.Itoa(i+1), "--log-level=warn",
		}
		if cfg.Features.EngineTestControl {
			eArgs = append(eArgs, "--enable-test-control")
		}
		engines = append(engines, fleet.Spec{Name: EngineName(i), Path: cfg.Bin.Engine, URL: "http://" + engine, Args: eArgs})
		pylons = append(pylons, fleet.Spec{Name: PylonName(i), Path: cfg.Bin.Pylon, URL: "http://" + pylon, AdminURL: "http://" + pylonAdmin, Args: []string{
			"--http-listen-addr=" + pylon, "--admin-listen-addr=" + pylonAdmin, "--upstream-http-base-url=http://" + engine,
			"--model-name=" + Model, "--gateway=" + f.AdminURL, "--inference-server-id=" + BackendID(i), "--log-level=warn",
		}})
	}
	gateway := fleet.Spec{Name: GatewayName, Path: cfg.Bin.Gateway, URL: f.GatewayURL, AdminURL: f.AdminURL, Args: gwArgs}
	for _, sp := range append(engines, gateway) {
		if err := f.start(sp); err != nil {
			return f, err
		}
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for _, u := range append(f.EngineURLs[:len(f.EngineURLs):len(f.EngineURLs)], f.GatewayURL) {
		path := "/health"
		if u == f.GatewayURL {
			path = "/healthz"
		}
		if err := f.poll(ctx, deadline, func() error { return f.ok(ctx, u+path) }); err != nil {
			return f, err
		}
	}
	for _, sp := range pylons {
		if err := f.start(sp); err != nil {
			return f, err
		}
	}
	if err := f.WaitRoutable(ctx, Backends, time.Until(deadline)); err != nil {
		return f, err
	}
	return f, nil
}

// start starts sp, its output appended to <LogDir>/<name>.log.
func (f *Fleet) start(sp fleet.Spec) error {
	var log io.WriteCloser
	if f.cfg.LogDir != "" {
		if err := os.MkdirAll(f.cfg.LogDir, 0o750); err != nil {
			return err //nolint:wrapcheck // names the path
		}
		lf, err := os.OpenFile(filepath.Join(f.cfg.LogDir, sp.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err //nolint:wrapcheck // names the path
		}
		log = lf
	}
	p, err := fleet.Start(sp, log)
	if err != nil {
		return err //nolint:wrapcheck // names the process
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if old := f.procs[sp.Name]; old != nil {
		f.group.Replace(old, p)
	} else {
		f.group.Add(p)
	}
	f.procs[sp.Name] = p
	f.specs[sp.Name] = sp
	f.pids = append(f.pids, p.PID())
	return nil
}

func (f *Fleet) proc(name string) (*fleet.Proc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.procs[name]
	if p == nil {
		return nil, fmt.Errorf("no fleet process %s", name)
	}
	return p, nil
}

// Kill sends SIGKILL to process name (its process group) and waits until it is reaped.
func (f *Fleet) Kill(name string) error {
	p, err := f.proc(name)
	if err != nil {
		return err
	}
	p.Kill()
	return nil
}

// Restart starts process name again with the same command line (same ports), killing
// the old one first if it still runs.
func (f *Fleet) Restart(name string) error {
	p, err := f.proc(name)
	if err != nil {
		return err
	}
	if exited, _ := p.Exited(); !exited {
		p.Kill()
	}
	return f.start(p.Spec)
}

// Signal sends sig to process name's process group (SIGSTOP, SIGCONT).
func (f *Fleet) Signal(name string, sig syscall.Signal) error {
	p, err := f.proc(name)
	if err != nil {
		return err
	}
	return syscall.Kill(-p.PID(), sig) //nolint:wrapcheck // the signal's own error
}

// Stop resumes and stops every process (SIGTERM, SIGKILL after stopGrace) and waits for
// all. It may be called more than once.
func (f *Fleet) Stop() {
	f.mu.Lock()
	for _, p := range f.procs {
		if exited, _ := p.Exited(); !exited {
			_ = syscall.Kill(-p.PID(), syscall.SIGCONT) // a frozen process cannot act on SIGTERM
		}
	}
	f.mu.Unlock()
	f.group.Stop(stopGrace)
	f.hc.CloseIdleConnections()
}

// PIDs returns the ids of every process the fleet ever started.
func (f *Fleet) PIDs() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.pids...)
}

// PID returns process name's current id, 0 when unknown.
func (f *Fleet) PID(name string) int {
	p, err := f.proc(name)
	if err != nil {
		return 0
	}
	return p.PID()
}

// RSS returns process name's resident memory in bytes, -1 when it is not running.
func (f *Fleet) RSS(name string) int64 {
	p, err := f.proc(name)
	if err != nil {
		return -1
	}
	if exited, _ := p.Exited(); exited {
		return -1
	}
	return RSS(p.PID())
}

// RSSAll returns every process's RSS in ProcNames order.
func (f *Fleet) RSSAll() []int64 {
	out := make([]int64, len(ProcNames))
	for i, n := range ProcNames {
		out[i] = f.RSS(n)
	}
	return out
}

// Exited reports the fleet processes that have exited (not killed by the suite, which
// restarts or leaves them): a crash shows up here.
func (f *Fleet) Exited() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, n := range ProcNames {
		if p := f.procs[n]; p != nil {
			if exited, err := p.Exited(); exited {
				out = append(out, fmt.Sprintf("%s (%v)", n, err))
			}
		}
	}
	return out
}

var errNotReady = errors.New("not ready")

func (f *Fleet) get(ctx context.Context, u string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return nil, 0, err //nolint:wrapcheck // names the URL
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return nil, 0, err //nolint:wrapcheck // names the URL
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return body, resp.StatusCode, err //nolint:wrapcheck // the read's own error
}

func (f *Fleet) ok(ctx context.Context, u string) error {
	_, code, err := f.get(ctx, u)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s: status %d", u, code)
	}
	return nil
}

// poll calls check every 50 ms until it succeeds, the deadline passes or ctx ends.
func (f *Fleet) poll(ctx context.Context, deadline time.Time, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %w (logs in %s)", errNotReady, err, f.cfg.LogDir)
		}
		if err := fleet.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// DebugState is the part of the gateway's /debug/state the suite reads.
type DebugState struct {
	Backends []struct {
		ID       string `json:"id"`
		Routable bool   `json:"routable"`
	} `json:"backends"`
	Targets []json.RawMessage `json:"targets"`
}

// State fetches the gateway's /debug/state.
func (f *Fleet) State(ctx context.Context) (DebugState, error) {
	var st DebugState
	body, code, err := f.get(ctx, f.AdminURL+"/debug/state")
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("/debug/state: status %d", code)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("/debug/state: %w", err)
	}
	return st, nil
}

// Routable returns the ids of the backends the gateway can route to.
func (f *Fleet) Routable(ctx context.Context) (map[string]bool, error) {
	st, err := f.State(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, b := range st.Backends {
		if b.Routable {
			out[b.ID] = true
		}
	}
	return out, nil
}

// WaitRoutable waits up to timeout until the gateway routes to at least n backends.
func (f *Fleet) WaitRoutable(ctx context.Context, n int, timeout time.Duration) error {
	return f.poll(ctx, time.Now().Add(timeout), func() error {
		if dead := f.Exited(); len(dead) > 0 {
			return fmt.Errorf("exited: %s", strings.Join(dead, ", "))
		}
		r, err := f.Routable(ctx)
		if err != nil {
			return err
		}
		if len(r) < n {
			return fmt.Errorf("the gateway routes to %d backends, want %d", len(r), n)
		}
		return nil
	})
}

// Metrics fetches and parses the /metrics of an admin URL.
func (f *Fleet) Metrics(ctx context.Context, adminURL string) ([]Series, error) {
	body, code, err := f.get(ctx, adminURL+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: status %d", adminURL, code)
	}
	return ParseMetrics(string(body)), nil
}

// ForceGC asks the gateway to collect garbage (a heap profile with gc=1; needs
// --enable-pprof).
func (f *Fleet) ForceGC(ctx context.Context) error {
	_, code, err := f.get(ctx, f.AdminURL+"/debug/pprof/heap?gc=1")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("heap profile: status %d", code)
	}
	return err
}

// EngineControl replaces engine i's fault injection for the fleet's model (the body of
// PUT /test-control/models/{model}; "{}" clears it).
func (f *Fleet) EngineControl(ctx context.Context, i int, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, f.EngineURLs[i]+"/test-control/models/"+Model, strings.NewReader(body))
	if err != nil {
		return err //nolint:wrapcheck // names the URL
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return err //nolint:wrapcheck // names the URL
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("engine %d test-control: status %d", i, resp.StatusCode)
	}
	return nil
}

// dialer is the suite's raw TCP dialer (slowloris, oversized bodies).
var dialer = net.Dialer{Timeout: 2 * time.Second}

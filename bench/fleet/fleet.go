package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/switchyard/switchyard/bench/scenario"
)

// Binaries are the paths of the three fleet binaries.
type Binaries struct {
	Engine  string
	Pylon   string
	Gateway string
}

// BinariesIn returns the binaries in dir (e.g. "bin").
func BinariesIn(dir string) Binaries {
	return Binaries{Engine: filepath.Join(dir, "engine"), Pylon: filepath.Join(dir, "pylon"), Gateway: filepath.Join(dir, "gateway")}
}

// Check reports the binaries that are missing.
func (b Binaries) Check() error {
	var errs []error
	for _, p := range []string{b.Engine, b.Pylon, b.Gateway} {
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("fleet binary %s is missing (run make build)", p))
		}
	}
	return errors.Join(errs...)
}

// Options configure a fleet launch.
type Options struct {
	Bin Binaries
	// TimeScale is passed to every engine as --time-scale.
	TimeScale float64
	// Seed is mixed into each engine's --seed.
	Seed uint64
	// WorkDir receives the lb-config file and the children's logs.
	WorkDir string
	// ReadyTimeout bounds the wait until every backend is routable (default 30 s).
	ReadyTimeout time.Duration
}

// Plan is the command lines of one algorithm's fleet.
type Plan struct {
	Engines  []Spec
	Gateways []Spec
	Pylons   []Spec
}

func url(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

func ms(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// NewPlan returns the command lines for scenario s under algorithm a, with the
// lb-config at lbConfigPath, on the given ports (clusters + gateways + backends of them).
func NewPlan(s *scenario.Scenario, a *scenario.Algorithm, lbConfigPath string, ports []int, opts Options) Plan {
	top := s.Topology()
	next := 0
	port := func() int { p := ports[next]; next++; return p }
	var p Plan
	timeScale := opts.TimeScale
	if timeScale == 0 {
		timeScale = 1
	}
	for ci := range top.Clusters {
		c := &top.Clusters[ci]
		e := c.Engine()
		pt := port()
		p.Engines = append(p.Engines, Spec{
			Name: "engine-" + strconv.Itoa(c.Index), Path: opts.Bin.Engine, URL: url(pt),
			Args: []string{
				"--http-listen-addr=127.0.0.1:" + strconv.Itoa(pt),
				"--model-name=" + s.Model,
				"--num-tokens=" + strconv.Itoa(scenario.EngineOutputTokens),
				"--token-delay-ms=" + ms(e.TokenDelayMs),
				"--decode-jitter-ms=" + ms(e.DecodeJitterMs),
				"--ttft-ms=" + ms(e.TTFTMs),
				"--ttft-jitter-ms=" + ms(e.TTFTJitterMs),
				"--prefill-tokens-per-s=" + ms(e.PrefillTokensPerS),
				"--max-concurrent-requests=" + strconv.Itoa(e.MaxConcurrentRequests),
				"--kv-cache-capacity-tokens=" + strconv.FormatUint(e.KVCacheCapacityTokens, 10),
				"--seed=" + strconv.FormatUint(opts.Seed*1000+uint64(c.Index)+1, 10), //nolint:gosec // small index
				"--time-scale=" + ms(timeScale),
				"--advertise-concurrency=" + strconv.FormatBool(!e.HideConcurrency),
			},
		})
	}
	gatewayArgs := make([]string, 0, s.GatewayCount())
	for i := range s.GatewayCount() {
		pt, admin := port(), port()
		p.Gateways = append(p.Gateways, Spec{
			Name: "gateway-" + strconv.Itoa(i), Path: opts.Bin.Gateway, URL: url(pt), AdminURL: url(admin),
			Args: []string{
				"--http-listen-addr=127.0.0.1:" + strconv.Itoa(pt),
				"--admin-listen-addr=127.0.0.1:" + strconv.Itoa(admin),
				"--lb-config-path=" + lbConfigPath,
				// A fixed id per replica: its balancers' random draws (seeded with it) repeat
				// from run to run, and differ from the other replicas'.
				"--gateway-id=gateway-" + strconv.Itoa(i),
			},
		})
		if a.ClusterBackends != "" {
			p.Gateways[i].Args = append(p.Gateways[i].Args, "--cluster-backends="+a.ClusterBackends)
		}
		gatewayArgs = append(gatewayArgs, "--gateway="+url(admin)) // pylons register on the admin listener
	}
	for bi := range top.Backends {
		b := &top.Backends[bi]
		pt, admin := port(), port()
		args := []string{
			"--http-listen-addr=127.0.0.1:" + strconv.Itoa(pt),
			"--admin-listen-addr=127.0.0.1:" + strconv.Itoa(admin),
			"--upstream-http-base-url=" + p.Engines[b.Cluster].URL,
			"--model-name=" + s.Model,
			"--advertise-url=" + url(pt),
			"--inference-server-id=" + b.ID,
			"--cluster-id=" + b.ClusterID,
			"--min-update-interval-ms=100",
			"--kv-cache-stats-path=/kv-cache/stats",
			// As the reference bench: a canary queued behind the workload's long
			// generations would time out and take a busy backend out of rotation.
			"--active-canary-interval-ms=0",
			// The mock engine sends its response headers once the prompt is prefilled.
			"--prompt-cached-at=headers",
		}
		if tps := b.Profile.Registration.LastMeanInputTPS; tps > 0 {
			// Pinned, as the reference bench does: the measured input throughput counts
			// prefix-cache hits as processed tokens (input tokens / time to first output),
			// so on a cache-heavy workload it would climb far above the profile's prefill
			// rate and every backend would look equally fast.
			args = append(args, "--initial-input-tps="+ms(tps), "--benchmark-pin-input-tps")
		}
		args = append(args, admissionArgs(a.PylonQueueAdmission)...)
		if a.PylonQueueAdmission.Shares() && len(top.Clusters[b.Cluster].Backends) > 1 && b.Profile.MaxConcurrentRequests > 0 {
			// The engine's limit is the profile's times the cluster's pylons: each pylon
			// fills the profile's.
			args = append(args, "--engine-slot-share="+strconv.Itoa(b.Profile.MaxConcurrentRequests))
		}
		if a.PylonPromptWait != nil && !*a.PylonPromptWait {
			args = append(args, "--prompt-wait=0s")
		}
		args = append(args, gatewayArgs...)
		p.Pylons = append(p.Pylons, Spec{Name: "pylon-" + strconv.Itoa(b.Index), Path: opts.Bin.Pylon, URL: url(pt), AdminURL: url(admin), Args: args})
	}
	return p
}

// PortsNeeded is the number of ports NewPlan takes: one per engine, two (public and
// admin) per gateway and per pylon.
func PortsNeeded(s *scenario.Scenario) int {
	top := s.Topology()
	return len(top.Clusters) + 2*s.GatewayCount() + 2*len(top.Backends)
}

func admissionArgs(q *scenario.QueueAdmission) []string {
	if q == nil {
		return nil
	}
	var out []string
	if q.Enabled != nil {
		out = append(out, "--queue-admission="+strconv.FormatBool(*q.Enabled))
	}
	if q.MinDeltaMs != nil {
		out = append(out, "--queue-admission-min-delta="+ms(*q.MinDeltaMs)+"ms")
	}
	if q.ToleranceFactor != nil {
		out = append(out, "--queue-admission-tolerance="+ms(*q.ToleranceFactor))
	}
	if q.RequireFreeSlot != nil {
		out = append(out, "--queue-admission-require-free-slot="+strconv.FormatBool(*q.RequireFreeSlot))
	}
	if q.RetryAfterMs != nil && *q.RetryAfterMs >= 0 {
		out = append(out, "--queue-mismatch-retry-after="+strconv.FormatUint(uint64(math.Round(*q.RetryAfterMs)), 10)+"ms")
	}
	return out
}

// AdmissionMode labels the algorithm's pylon admission setting for reports.
func AdmissionMode(a *scenario.Algorithm) string {
	q := a.PylonQueueAdmission
	switch {
	case q == nil || q.Enabled == nil:
		return "default"
	case *q.Enabled:
		return "enabled"
	default:
		return "disabled"
	}
}

// Fleet is one algorithm's running fleet.
type Fleet struct {
	Plan     Plan
	group    Group
	mu       sync.Mutex
	engines  []*Proc
	gateways []*Proc
	pylons   []*Proc
	logDir   string
	client   *http.Client
}

// Launch writes a's lb-config into opts.WorkDir, starts engines, gateways and pylons
// and waits until every gateway lists the model and sees every pylon routable. On any
// error everything started is stopped.
func Launch(ctx context.Context, s *scenario.Scenario, a *scenario.Algorithm, opts Options) (f *Fleet, err error) {
	if err := os.MkdirAll(opts.WorkDir, 0o750); err != nil {
		return nil, fmt.Errorf("fleet work dir: %w", err)
	}
	doc, err := a.LBConfigJSON()
	if err != nil {
		return nil, fmt.Errorf("algorithm %s: %w", a.Name, err)
	}
	cfgPath, err := filepath.Abs(filepath.Join(opts.WorkDir, "lb-config.json"))
	if err != nil {
		return nil, fmt.Errorf("lb config path: %w", err)
	}
	if err := os.WriteFile(cfgPath, doc, 0o600); err != nil {
		return nil, fmt.Errorf("write lb config: %w", err)
	}
	ports, err := FreePorts(ctx, PortsNeeded(s))
	if err != nil {
		return nil, err
	}
	f = &Fleet{
		Plan:   NewPlan(s, a, cfgPath, ports, opts),
		logDir: filepath.Join(opts.WorkDir, "logs"),
		client: &http.Client{Timeout: 2 * time.Second},
	}
	defer func() {
		if err != nil {
			f.Close()
			f = nil
		}
	}()
	start := func(specs []Spec) ([]*Proc, error) {
		var out []*Proc
		for _, sp := range specs {
			p, err := f.start(sp)
			if err != nil {
				return out, err
			}
			out = append(out, p)
		}
		return out, nil
	}
	if f.engines, err = start(f.Plan.Engines); err != nil {
		return f, err
	}
	if f.gateways, err = start(f.Plan.Gateways); err != nil {
		return f, err
	}
	if err := f.waitHealthy(ctx, f.engines, "/health", opts.ReadyTimeout); err != nil {
		return f, err
	}
	if err := f.waitHealthy(ctx, f.gateways, "/healthz", opts.ReadyTimeout); err != nil {
		return f, err
	}
	if f.pylons, err = start(f.Plan.Pylons); err != nil {
		return f, err
	}
	if err := f.waitRoutable(ctx, s.Model, opts.ReadyTimeout); err != nil {
		return f, err
	}
	return f, nil
}

func (f *Fleet) start(sp Spec) (*Proc, error) {
	log, err := openLog(f.logDir, sp.Name)
	if err != nil {
		return nil, err
	}
	p, err := Start(sp, log)
	if err != nil {
		return nil, err
	}
	f.group.Add(p)
	return p, nil
}

// Close stops every child (SIGTERM, then SIGKILL after StopGrace) and waits for them.
func (f *Fleet) Close() { f.group.Stop(StopGrace) }

// GatewayURLs returns the gateways' base URLs.
func (f *Fleet) GatewayURLs() []string {
	out := make([]string, 0, len(f.Plan.Gateways))
	for _, g := range f.Plan.Gateways {
		out = append(out, g.URL)
	}
	return out
}

// ErrNotReady is returned when the fleet does not become routable in time.
var ErrNotReady = errors.New("fleet not ready")

func (f *Fleet) get(ctx context.Context, u string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return nil, 0, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return body, resp.StatusCode, err
}

// poll calls check every 100 ms until it returns nil, ctx ends or timeout passes.
func (f *Fleet) poll(ctx context.Context, timeout time.Duration, check func() error) error {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		if dead := f.deadChild(); dead != "" {
			return fmt.Errorf("%w: %s exited (see %s)", ErrNotReady, dead, f.logDir)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w after %v: %w", ErrNotReady, timeout, err)
		case <-tick.C:
		}
	}
}

func (f *Fleet) deadChild() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, list := range [][]*Proc{f.engines, f.gateways, f.pylons} {
		for _, p := range list {
			if exited, err := p.Exited(); exited {
				return fmt.Sprintf("%s (%v)", p.Name, err)
			}
		}
	}
	return ""
}

func (f *Fleet) waitHealthy(ctx context.Context, procs []*Proc, path string, timeout time.Duration) error {
	return f.poll(ctx, timeout, func() error {
		for _, p := range procs {
			if _, code, err := f.get(ctx, p.URL+path); err != nil || code != http.StatusOK {
				return fmt.Errorf("%s %s: status %d: %w", p.Name, path, code, err)
			}
		}
		return nil
	})
}

// Readiness assumptions about the gateway (docs/bench.md):
// GET /v1/models lists the model ids that have a routable backend (OpenAI list shape),
// and GET /debug/state is a JSON object with a top-level "backends" array whose entries
// carry "routable": true once registered, active and probed.
type modelList struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
}

type debugState struct {
	Backends []struct {
		ID       string `json:"id"`
		Routable bool   `json:"routable"`
	} `json:"backends"`
}

// Routable checks one gateway's readiness: model listed and at least want routable backends.
func Routable(models, state []byte, model string, want int) error {
	var ml modelList
	if err := json.Unmarshal(models, &ml); err != nil {
		return fmt.Errorf("/v1/models: %w", err)
	}
	if !slices.ContainsFunc(ml.Data, func(m struct {
		ID string `json:"id"`
	},
	) bool {
		return m.ID == model
	}) {
		return fmt.Errorf("/v1/models does not list %s yet", model)
	}
	var st debugState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("/debug/state: %w", err)
	}
	n := 0
	for _, b := range st.Backends {
		if b.Routable {
			n++
		}
	}
	if n < want {
		return fmt.Errorf("/debug/state has %d routable backends of %d", n, want)
	}
	return nil
}

func (f *Fleet) waitRoutable(ctx context.Context, model string, timeout time.Duration) error {
	want := len(f.Plan.Pylons)
	return f.poll(ctx, timeout, func() error {
		for _, g := range f.Plan.Gateways {
			models, _, err := f.get(ctx, g.URL+"/v1/models")
			if err != nil {
				return err
			}
			state, _, err := f.get(ctx, g.AdminURL+"/debug/state")
			if err != nil {
				return err
			}
			if err := Routable(models, state, model, want); err != nil {
				return fmt.Errorf("%s: %w", g.Name, err)
			}
		}
		return nil
	})
}

// ScrapeMetrics returns the /metrics text of every gateway and pylon, in plan order; a
// process that does not answer gives "".
func (f *Fleet) ScrapeMetrics(ctx context.Context) []string {
	specs := slices.Concat(f.Plan.Gateways, f.Plan.Pylons)
	out := make([]string, len(specs))
	for i, sp := range specs {
		if body, code, err := f.get(ctx, sp.AdminURL+"/metrics"); err == nil && code == http.StatusOK {
			out[i] = string(body)
		}
	}
	return out
}

// Degrade performs one degradation action; unsupported actions return an error the
// runner reports and ignores.
func (f *Fleet) Degrade(action string, backend int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if backend < 0 || backend >= len(f.pylons) {
		return fmt.Errorf("degradation: backend %d out of range", backend)
	}
	engineIdx := slices.IndexFunc(f.Plan.Engines, func(e Spec) bool {
		return slices.Contains(f.Plan.Pylons[backend].Args, "--upstream-http-base-url="+e.URL)
	})
	restart := func(list []*Proc, i int) error {
		old := list[i]
		old.Kill()
		p, err := f.start(old.Spec)
		if err != nil {
			return err
		}
		f.group.Replace(old, p)
		list[i] = p
		return nil
	}
	switch action {
	case scenario.ActionDeleteBackendPod, scenario.ActionKillPylon:
		f.pylons[backend].Kill()
	case scenario.ActionKillEngine:
		f.engines[engineIdx].Kill()
	case scenario.ActionRestartPylon:
		return restart(f.pylons, backend)
	case scenario.ActionRestartEngine:
		return restart(f.engines, engineIdx)
	default:
		return fmt.Errorf("degradation action %s is not supported on a local fleet", action)
	}
	return nil
}

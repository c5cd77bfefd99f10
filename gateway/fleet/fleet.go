// Package fleet holds the gateway's backend actors: one protoactor actor per registered
// pylon, owning its latest registration, per-model stats, RTT and liveness deadline, and
// telling the schedulers of its models whenever anything changes. The Fleet registry is
// the control endpoint's entry point and owns each backend's data-path client and prober.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/internal/wire"
)

// ErrConflict means a live registration tried to change its id, URL, cluster or routing key.
var ErrConflict = errors.New("registration conflicts with the live registration")

// Errors of UpdateLoad: the pylon should send a full registration.
var (
	// ErrUnknownBackend means no live backend has the load update's id (the gateway
	// restarted, or the backend expired or deregistered).
	ErrUnknownBackend = errors.New("unknown backend")
	// ErrRegistrationRequired means a load update names a model, or a generation of one,
	// that the backend's registration does not list.
	ErrRegistrationRequired = errors.New("a full registration is required")
)

// ErrProbeAnswered marks a failed health probe that the pylon did answer (a 5xx): the
// pylon is up, so its requests are not abandoned (see Deps.OnUnresponsive).
var ErrProbeAnswered = errors.New("the health probe was answered with a server error")

// expiredStall is how long a stream of a backend that expired silence after its last
// heartbeat must have sent nothing to be ended with it: half of that silence (1.5 s by
// default). A pylon goes silent within a heartbeat of its last one (else it would have
// sent another), and expiry comes after three, so its streams have been silent for two
// thirds of the time at least; one still sending (or in a prefill of a second or so) is
// spared.
func expiredStall(silence time.Duration) time.Duration { return silence / 2 }

// silentProbesToAbandon is the number of health probes in a row without any answer after
// which a backend's waiting requests are abandoned while it still sends heartbeats (its
// data path is wedged): two, so one slow probe alone never costs requests.
const silentProbesToAbandon = 2

// Deps are the fleet's dependencies.
type Deps struct {
	Now    func() time.Time
	Logger *slog.Logger
	System *actor.ActorSystem
	// Schedulers maps routing targets to scheduler actors. A backend attaches to the
	// target of each model it lists and detaches when it stops listing it, expires or
	// deregisters; a target left without backends is collected (see dispatch.Directory).
	Schedulers *dispatch.Directory
	// NewClient builds the data-path client of a backend URL.
	NewClient func(u *url.URL) *fasthttp.HostClient
	// Probe measures one round trip to a backend through its data-path client; nil
	// disables probing (tests report RTTs themselves).
	Probe func(ctx context.Context, c *fasthttp.HostClient, backendID string) (time.Duration, error)
	// ProbeInterval is the RTT probe period.
	ProbeInterval time.Duration
	// DefaultHeartbeat applies when a registration does not say its heartbeat.
	DefaultHeartbeat time.Duration
	// MinExpiry is the shortest time a backend stays registered without a heartbeat, so a
	// very short heartbeat (or a briefly starved process) does not flap the fleet.
	MinExpiry time.Duration
	// OnExpired is called (from the actor) when a backend expires or deregisters.
	OnExpired func(id string)
	// Outlier is the passive health policy (zero: no ejection).
	Outlier Outlier
	// OnEjected is called (from the actor) when a backend is ejected.
	OnEjected func(id string, why Failure)
	// OnUnresponsive is called when a backend's pylon stopped answering: it expired (its
	// heartbeats stopped; a deregistration, which drains, does not count), or
	// silentProbesToAbandon health probes in a row got no answer at all (none within the
	// probe timeout, or no connection; a 5xx, ErrProbeAnswered, is an answer). The
	// gateway abandons the backend's requests still waiting for an answer, so they fail
	// over at once instead of waiting out --upstream-headers-timeout. With stalled > 0
	// (an expiry: half the time since the backend's last heartbeat; its streams have been
	// silent for two thirds of it at least, as it went silent within a heartbeat of its
	// last one) it also ends the streams the backend has sent nothing for that long, with
	// an error event instead of a hang. It returns the number of connections closed.
	// Nil: nothing is abandoned.
	OnUnresponsive func(b *Backend, stalled time.Duration) int
}

// Fleet is the registry of backends. Safe for concurrent use.
type Fleet struct {
	deps     Deps
	mu       sync.RWMutex // read-locked on the per-request path (Get)
	backends map[string]*Backend
	wg       sync.WaitGroup
	ejected  atomic.Int64 // backends ejected right now
}

// Backend is one registered backend: identity, data-path client and actor.
type Backend struct {
	ID         string
	URL        string
	ClusterID  string
	RoutingKey string
	// IDBytes, URLBytes and ClusterIDBytes are ID, URL and ClusterID as bytes for the
	// response headers set on every request.
	IDBytes, URLBytes, ClusterIDBytes []byte
	Client                            *fasthttp.HostClient
	seq                               atomic.Uint64
	// failing is set while the backend has failures on record: only then does a
	// successful request message its actor (see Fleet.ReportSuccess).
	failing atomic.Bool
	pid     *actor.PID
	cancel  context.CancelFunc
	// abandoned counts the times the backend's waiting requests were abandoned (see
	// Abandoned).
	abandoned atomic.Uint64
	// models is the model → generation map of the last registration accepted, which
	// load updates are checked against (written by Register, read by UpdateLoad).
	models atomic.Pointer[map[string]uint64]
	// The report slot: the latest load report its actor has not taken yet (reports are
	// latest-wins, so under load many collapse into one actor message).
	reportMu  sync.Mutex
	report    loadReported
	reportSet bool
}

// takeReport empties the report slot.
func (b *Backend) takeReport() (loadReported, bool) {
	b.reportMu.Lock()
	defer b.reportMu.Unlock()
	m, ok := b.report, b.reportSet
	b.report, b.reportSet = loadReported{}, false
	return m, ok
}

// State is a backend's published state (for /debug/state).
type State struct {
	ID         string                 `json:"id"`
	URL        string                 `json:"url"`
	ClusterID  string                 `json:"cluster_id"`
	RoutingKey string                 `json:"routing_key"`
	RTTMs      float64                `json:"rtt_ms"`
	HasRTT     bool                   `json:"has_rtt"`
	Routable   bool                   `json:"routable"`
	LastSeen   time.Time              `json:"last_registration"`
	Models     map[string]*ModelState `json:"models"`
	// Health is the passive health (outlier ejection) state.
	Health EjectionState `json:"health"`
}

// ModelState is one model of a backend in State.
type ModelState struct {
	Status     string     `json:"status"`
	Generation uint64     `json:"generation"`
	StatsAgeMs int64      `json:"stats_age_ms"`
	SeqEcho    uint64     `json:"dispatch_seq_echo"`
	Stats      wire.Stats `json:"stats"`
}

// New returns an empty fleet.
func New(deps Deps) *Fleet {
	f := &Fleet{deps: deps, backends: map[string]*Backend{}}
	if deps.Schedulers != nil {
		deps.Schedulers.RestoreFrom(f.views)
	}
	return f
}

// viewTimeout bounds the wait for one backend actor's view when a scheduler restores.
const viewTimeout = time.Second

// views returns the current view of t's model of every backend of t's routing key that
// lists it: what a scheduler restarted after a failure rebuilds its state from. The
// backend actors are asked all at once; one that does not answer within viewTimeout is
// left out (its next report or registration brings it back).
func (f *Fleet) views(t dispatch.Target) []dispatch.BackendView {
	f.mu.RLock()
	pids := make([]*actor.PID, 0, len(f.backends))
	for _, b := range f.backends {
		if b.RoutingKey == t.RoutingKey {
			pids = append(pids, b.pid)
		}
	}
	f.mu.RUnlock()
	futures := make([]*actor.Future, len(pids))
	for i, pid := range pids {
		futures[i] = f.deps.System.Root.RequestFuture(pid, viewRequest{model: t.Model}, viewTimeout)
	}
	var out []dispatch.BackendView
	for _, fu := range futures {
		if v, err := fu.Result(); err == nil {
			if r, ok := v.(viewReply); ok && r.ok {
				out = append(out, r.view)
			}
		}
	}
	return out
}

// Register applies a registration snapshot: it creates the backend (actor, client,
// prober) on first sight and forwards later snapshots to its actor. A live backend may not
// change its URL, cluster or routing key (ErrConflict).
func (f *Fleet) Register(reg wire.Registration) error {
	f.mu.Lock()
	b, ok := f.backends[reg.ID]
	if ok {
		f.mu.Unlock()
		if b.URL != reg.URL || b.ClusterID != reg.ClusterID || b.RoutingKey != reg.RoutingKey {
			return fmt.Errorf("%w: backend %s is live with url %s, cluster %s, routing key %q", ErrConflict, b.ID, b.URL, b.ClusterID, b.RoutingKey)
		}
		b.setModels(&reg)
		f.deps.System.Root.Send(b.pid, registered{reg: reg, at: f.deps.Now()})
		return nil
	}
	u, err := url.Parse(reg.URL)
	if err != nil {
		f.mu.Unlock()
		return fmt.Errorf("backend %s: %w", reg.ID, err)
	}
	b = &Backend{
		ID: reg.ID, URL: reg.URL, ClusterID: reg.ClusterID, RoutingKey: reg.RoutingKey, Client: f.deps.NewClient(u),
		IDBytes: []byte(reg.ID), URLBytes: []byte(reg.URL), ClusterIDBytes: []byte(reg.ClusterID),
	}
	b.setModels(&reg)
	a := &backendActor{fleet: f, b: b, models: map[string]*modelView{}}
	// Inline mailbox: reports from handlers are applied on their goroutine when the actor
	// is idle (no goroutine hop, no allocation), still one message at a time.
	b.pid = f.deps.System.Root.Spawn(actors.InlineProps(a.incarnate))
	f.backends[reg.ID] = b
	var ctx context.Context
	ctx, b.cancel = context.WithCancel(context.Background())
	f.mu.Unlock()
	f.deps.System.Root.Send(b.pid, registered{reg: reg, at: f.deps.Now()})
	if f.deps.Probe != nil {
		f.wg.Add(1)
		go f.probeLoop(ctx, b)
	}
	return nil
}

// setModels records the models and generations reg lists (the load updates' reference).
func (b *Backend) setModels(reg *wire.Registration) {
	if cur := b.models.Load(); cur != nil && len(*cur) == len(reg.Models) {
		same := true
		for name := range reg.Models {
			if g, ok := (*cur)[name]; !ok || g != reg.Models[name].Generation {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	m := make(map[string]uint64, len(reg.Models))
	for name := range reg.Models {
		m[name] = reg.Models[name].Generation
	}
	b.models.Store(&m)
}

// UpdateLoad applies a pylon's load update (wire.LoadUpdate) to backend id: like a
// registration it refreshes the backend's liveness and replaces each listed model's
// stats (ordered against the load reports as a registration is), and it changes nothing
// else. ErrUnknownBackend when no live backend has the id, ErrRegistrationRequired when
// the update names a model or generation the backend's registration does not list: the
// pylon then sends a full registration. The fleet keeps u.
func (f *Fleet) UpdateLoad(id string, u *wire.LoadUpdate) error {
	b := f.Get(id)
	if b == nil {
		return fmt.Errorf("%w: backend %q is not registered; send a full registration", ErrUnknownBackend, id)
	}
	models := *b.models.Load()
	for i := range u.Models {
		r := &u.Models[i]
		if g, ok := models[r.Model]; !ok || g != r.Generation {
			return fmt.Errorf("%w: backend %s's registration does not list generation %d of model %q", ErrRegistrationRequired, id, r.Generation, r.Model)
		}
	}
	f.deps.System.Root.Send(b.pid, loadUpdated{update: u, at: f.deps.Now()})
	return nil
}

// Deregister removes a backend at once (clean pylon shutdown). It reports whether the
// backend was known.
func (f *Fleet) Deregister(id string) bool {
	b := f.Get(id)
	if b == nil {
		return false
	}
	f.deps.System.Root.Send(b.pid, deregistered{})
	return true
}

// Get returns the live backend id, or nil.
func (f *Fleet) Get(id string) *Backend {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.backends[id]
}

// ReportLoad hands a response's x-pylon-load report to b's actor (a backend that expired
// meanwhile ignores it: its actor is stopped). Reports are latest-wins: while one is
// waiting for the actor, a newer report of the same model replaces it (an older one, by
// dispatch sequence and observation time, is dropped as the actor would drop it) and no
// second message is sent. A report of another model goes as its own message.
func (f *Fleet) ReportLoad(b *Backend, r *wire.LoadReport, at time.Time) {
	switch b.offerReport(r, at) {
	case reportNotify:
		f.deps.System.Root.Send(b.pid, reportReady{})
	case reportAlone:
		m := reportPool.Get().(*loadReported) //nolint:forcetypeassert // the pool holds only *loadReported
		m.report, m.at = *r, at
		f.deps.System.Root.Send(b.pid, m)
	default: // merged into the waiting report
	}
}

// What offerReport asks of the caller.
const (
	reportMerged = iota // the slot already waits for the actor: nothing to send
	reportNotify        // the slot was empty: tell the actor
	reportAlone         // another model's report waits: send r as its own message
)

// offerReport puts r in b's report slot (see ReportLoad).
func (b *Backend) offerReport(r *wire.LoadReport, at time.Time) int {
	b.reportMu.Lock()
	defer b.reportMu.Unlock()
	switch {
	case !b.reportSet:
		b.report.report, b.report.at, b.reportSet = *r, at, true
		return reportNotify
	case b.report.report.Model != r.Model:
		return reportAlone
	case r.Replaces(&b.report.report):
		b.report.report, b.report.at = *r, at
	default:
	}
	return reportMerged
}

// ReportRTT hands a measured round trip to the backend's actor.
func (f *Fleet) ReportRTT(id string, rtt time.Duration) {
	if b := f.Get(id); b != nil {
		f.deps.System.Root.Send(b.pid, rttMeasured{rtt: rtt})
	}
}

// Members are the ids and cluster ids of the registered backends.
type Members struct {
	IDs, Clusters map[string]struct{}
}

// Members returns the registered backends' ids and cluster ids.
func (f *Fleet) Members() Members {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m := Members{IDs: make(map[string]struct{}, len(f.backends)), Clusters: map[string]struct{}{}}
	for id, b := range f.backends {
		m.IDs[id] = struct{}{}
		m.Clusters[b.ClusterID] = struct{}{}
	}
	return m
}

// States returns the published state of every backend, sorted by id.
func (f *Fleet) States() []*State {
	f.mu.Lock()
	pids := make([]*actor.PID, 0, len(f.backends))
	for _, b := range f.backends {
		pids = append(pids, b.pid)
	}
	f.mu.Unlock()
	out := make([]*State, 0, len(pids))
	for _, pid := range pids {
		if v, err := f.deps.System.Root.RequestFuture(pid, stateRequest{}, time.Second).Result(); err == nil {
			if s, ok := v.(*State); ok {
				out = append(out, s)
			}
		}
	}
	slices.SortFunc(out, func(a, b *State) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Stop stops every backend actor and prober and waits for the probers.
func (f *Fleet) Stop() {
	f.mu.Lock()
	bs := make([]*Backend, 0, len(f.backends))
	for _, b := range f.backends {
		bs = append(bs, b)
	}
	f.backends = map[string]*Backend{}
	f.mu.Unlock()
	for _, b := range bs {
		b.cancel()
		_ = f.deps.System.Root.StopFuture(b.pid).Wait()
		b.Client.CloseIdleConnections()
	}
	f.wg.Wait()
}

// forget drops an expired backend from the registry.
func (f *Fleet) forget(b *Backend) {
	f.mu.Lock()
	if f.backends[b.ID] == b {
		delete(f.backends, b.ID)
	}
	f.mu.Unlock()
	b.cancel()
	b.Client.CloseIdleConnections()
	if f.deps.OnExpired != nil {
		f.deps.OnExpired(b.ID)
	}
}

// Abandoned counts the times b's requests waiting for an answer were abandoned because
// its pylon stopped answering. A proxy reads it before and after an attempt: a failed
// attempt during which it moved was (most likely) abandoned, not refused by the pylon.
func (b *Backend) Abandoned() uint64 { return b.abandoned.Load() }

// abandon tells the gateway to give up b's requests still waiting for an answer (and, with
// stalled > 0, its streams silent that long: see Deps.OnUnresponsive); why says what showed
// the pylon unresponsive (expired, health_probes_unanswered).
func (f *Fleet) abandon(b *Backend, why string, stalled time.Duration) {
	if f.deps.OnUnresponsive == nil {
		return
	}
	b.abandoned.Add(1)
	if n := f.deps.OnUnresponsive(b, stalled); n > 0 {
		f.deps.Logger.Warn("backend_unresponsive", "backend", b.ID, "why", why, "abandoned", n,
			"detail", "requests it had not begun to answer fail over to other backends; streams it stopped feeding end with an error event")
	}
}

func (f *Fleet) probeLoop(ctx context.Context, b *Backend) {
	defer f.wg.Done()
	silent := 0 // health probes in a row without any answer
	probe := func() {
		rtt, err := f.deps.Probe(ctx, b.Client, b.ID)
		switch {
		case err == nil:
			silent = 0
			f.ReportRTT(b.ID, rtt)
		case ctx.Err() != nil:
		default:
			f.deps.Logger.Debug("health_probe_failed", "backend", b.ID, "err", err)
			f.ReportFailure(b, FailProbe)
			if errors.Is(err, ErrProbeAnswered) {
				silent = 0
				return
			}
			silent++
			if silent >= silentProbesToAbandon {
				f.abandon(b, "health_probes_unanswered", 0)
			}
		}
	}
	probe()
	actors.Every(ctx, f.deps.ProbeInterval, probe)
}

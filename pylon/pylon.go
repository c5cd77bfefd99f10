// Package pylon is the sidecar next to one inference engine (docs/pylon.md): it relays
// the gateway's requests to the engine over fasthttp while observing the stream, runs
// local queue admission, keeps one protoactor actor per model generation with the
// per-model aggregate, ingests the engine's own stats, and registers the full snapshot
// with every gateway through one registrar actor each.
package pylon

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/gateway/control"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/secret"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/pylon/engine"
	"github.com/switchyard/switchyard/pylon/register"
	"github.com/switchyard/switchyard/pylon/relay"
	"github.com/switchyard/switchyard/pylon/stats"
)

// Deps are the pylon's collaborators; zero fields get production defaults.
type Deps struct {
	Logger *slog.Logger
	Now    func() time.Time
	// Dial connects to the engine and to gateways (default: TCP).
	Dial func(addr string) (net.Conn, error)
	// Listener, when set, is served instead of listening on Config.ListenAddr;
	// AdminListener likewise for Config.AdminListenAddr.
	Listener      net.Listener
	AdminListener net.Listener
	// Version is reported in target_info.
	Version string
	// LookupHost resolves Config.GatewayDNS (default net.DefaultResolver.LookupHost).
	LookupHost func(ctx context.Context, host string) ([]string, error)
}

// Pylon is one sidecar instance.
type Pylon struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	sys     *actor.ActorSystem
	metrics *pylonMetrics

	client       *fasthttp.HostClient
	engine       *relay.Conns // the client's connections: timeouts and shutdown abort
	dial         fasthttp.DialFunc
	clients      *clientConns // the server's connections
	control      *fasthttp.Client
	upstreamHost string
	// upstreamScheme is the engine's URL scheme: every relayed request gets it (one from a
	// TLS gateway connection arrives as https).
	upstreamScheme string
	fromEngine     headerSet // removed from engine responses (fromEngineSet)
	replies        *replyPool
	server         *fasthttp.Server
	ln             net.Listener
	admin          *fasthttp.Server // /metrics, /healthz, /readyz
	adminLn        net.Listener
	token          *secret.Token
	serverTLS      *tls.Config // data and admin listeners; nil = plain
	dataTLS        *tls.Config // serverTLS plus the gateways' client-certificate check, if any

	models   atomic.Pointer[map[string]*modelEntry]
	modelsMu sync.Mutex // serializes writers of models
	nextGen  atomic.Uint64

	gateways gatewayTable // the gateways dispatching here: dispatch seqs echoed
	// structure counts changes a load report cannot carry (models added or retired,
	// draining); sentStructure is its value in the last registration built per gateway.
	structure     atomic.Uint64
	canaryFailing atomic.Bool // the last canary round failed: models advertised INACTIVE
	sentMu        sync.Mutex
	sentStructure map[string]uint64

	// registrars is set by Run (after calibration) and whenever the gateway set changes;
	// before that publish is a no-op. regs is the same set by gateway URL (under regMu).
	registrars atomic.Pointer[[]registrarRef]
	regMu      sync.Mutex
	regs       map[string]registrarRef
	lookupHost func(ctx context.Context, host string) ([]string, error)
	draining   atomic.Bool
	inflight   atomic.Int64
	// eng is what the pylon knows of the engine beyond the data path: served names,
	// the metrics scrape's model mapping, canary outcomes (enginemodels.go).
	eng engineState
}

// New validates cfg and builds a pylon that is not yet running.
func New(cfg Config, deps Deps) (*Pylon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if cfg.ClusterID == "" {
		cfg.ClusterID = cfg.ID
	}
	u, _ := url.Parse(cfg.UpstreamBaseURL)
	p := &Pylon{
		cfg: cfg, log: deps.Logger.With("component", "pylon"), now: deps.Now,
		metrics: newPylonMetrics(cfg.MetricsPrefix, cfg.ID, deps.Version), upstreamHost: u.Host, upstreamScheme: u.Scheme,
		sentStructure: map[string]uint64{}, ln: deps.Listener, adminLn: deps.AdminListener, fromEngine: fromEngineSet(cfg.UpstreamRetryHeader),
		replies:    newReplyPool(),
		lookupHost: deps.LookupHost,
	}
	if p.lookupHost == nil {
		p.lookupHost = net.DefaultResolver.LookupHost
	}
	clientTLS, err := p.setUpSecurity()
	if err != nil {
		return nil, err
	}
	empty := map[string]*modelEntry{}
	p.models.Store(&empty)
	var dial fasthttp.DialFunc
	if deps.Dial != nil {
		dial = fasthttp.DialFunc(deps.Dial)
	}
	p.dial = dial
	p.engine = relay.NewConns(dial, cfg.FirstOutputTimeout, cfg.StreamIdleTimeout, p.metrics.upstreamTimedOut)
	p.clients = newClientConns()
	p.client = &fasthttp.HostClient{
		Addr: u.Host, IsTLS: u.Scheme == "https", TLSConfig: clientTLS,
		DialTimeout: p.engine.DialTimeout, MaxConns: 4096, MaxConnWaitTimeout: 5 * time.Second,
		MaxIdleConnDuration: 4 * time.Second, NoDefaultUserAgentHeader: true,
		RetryIfErr: func(_ *fasthttp.Request, attempts int, err error) (bool, bool) {
			// A reused keep-alive connection the engine already closed: safe to resend once.
			return false, attempts < 2 && errors.Is(err, fasthttp.ErrConnectionClosed)
		},
	}
	p.control = &fasthttp.Client{Dial: dial, TLSConfig: clientTLS, NoDefaultUserAgentHeader: true, MaxIdleConnDuration: 10 * time.Second}
	p.server = p.newServer("switchyard-pylon")
	p.server.CloseOnShutdown, p.server.ConnState = true, p.clients.state
	p.admin = &fasthttp.Server{
		Handler: p.serveAdmin, Name: "switchyard-pylon-admin", NoDefaultServerHeader: true, CloseOnShutdown: true,
		MaxRequestBodySize: 1 << 10, Logger: fasthttpLogger{p.log},
	}
	// Header, body and idle timeouts and the connection cap on both listeners; request
	// bodies are read against the limits as they arrive. No write timeout: a relayed
	// stream may last as long as the engine generates.
	httpserver.Apply(p.server, cfg.ServerLimits, p.dataTLS != nil)
	httpserver.Apply(p.admin, cfg.ServerLimits, p.serverTLS != nil)
	p.sys = actors.NewSystem(p.log)
	return p, nil
}

// newServer is a data-path server: the handler, the body limit and problem+json answers
// for requests fasthttp cannot read (a body over the limit gets 413).
func (p *Pylon) newServer(name string) *fasthttp.Server {
	return &fasthttp.Server{
		Handler: p.serve, Name: name, NoDefaultServerHeader: true, NoDefaultContentType: true,
		MaxRequestBodySize: p.cfg.MaxRequestBodyBytes, Logger: fasthttpLogger{p.log},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			unreadableRequest(err, p.cfg.MaxRequestBodyBytes).write(ctx)
		},
	}
}

// setUpSecurity loads the control token and the server TLS configurations, and returns the
// client TLS configuration (gateways and an https engine).
func (p *Pylon) setUpSecurity() (*tls.Config, error) {
	tok, err := secret.NewToken(p.cfg.ControlToken, p.cfg.ControlTokenFile, p.log)
	if err != nil {
		return nil, err
	}
	p.token = tok
	if p.serverTLS, err = tlsx.ServerConfig(tlsx.ServerOptions{CertFile: p.cfg.TLS.CertFile, KeyFile: p.cfg.TLS.KeyFile}, p.log); err != nil {
		return nil, err
	}
	p.dataTLS = p.serverTLS
	if p.cfg.TLS.ClientCAFile != "" {
		if p.serverTLS == nil {
			return nil, errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
		}
		if p.dataTLS, err = tlsx.ServerConfig(p.cfg.TLS, p.log); err != nil {
			return nil, err
		}
	}
	return tlsx.ClientConfig(p.cfg.ClientTLS, p.log)
}

// registrarRef is a running registrar and the notifier that wakes it on change.
type registrarRef struct {
	pid       *actor.PID
	notify    *register.Notifier
	gateway   string
	connected *metrics.Gauge
}

type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug("fasthttp", "detail", fmt.Sprintf(format, args...))
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// AdminAddr returns the admin listener's address once Run has started listening (nil:
// none).
func (p *Pylon) AdminAddr() net.Addr {
	if p.adminLn == nil {
		return nil
	}
	return p.adminLn.Addr()
}

// Addr returns the data listener's address once Run has started listening.
func (p *Pylon) Addr() net.Addr {
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

func (p *Pylon) lookup(model []byte) *modelEntry {
	return (*p.models.Load())[string(model)]
}

// seqOf is the highest dispatch seq admitted from the gateway with id gatewayID (0: none).
func (p *Pylon) seqOf(gatewayID string) uint64 {
	if s := p.gateways.get(gatewayID); s != nil {
		return s.seq.Load()
	}
	return 0
}

// setModels makes exactly names served: new models get a new generation, models no
// longer listed have their generation retired.
func (p *Pylon) setModels(names []string) {
	p.modelsMu.Lock()
	defer p.modelsMu.Unlock()
	old := *p.models.Load()
	next := make(map[string]*modelEntry, len(old)+len(names))
	for k, v := range old {
		next[k] = v
	}
	changed := false
	for _, name := range names {
		e, ok := next[name]
		if !ok {
			e = &modelEntry{name: name}
			e.metrics = newModelMetrics(p.metrics, name, func() *genSnapshot {
				if g := e.cur.Load(); g != nil {
					return g.snapshot(p.sys.Root)
				}
				return nil
			})
			next[name] = e
		}
		if e.cur.Load() == nil {
			e.cur.Store(p.spawnGeneration(name))
			changed = true
			p.log.Info("model_generation_started", "model", name, "generation", e.cur.Load().gen)
		}
	}
	for name, e := range next {
		if g := e.cur.Load(); g != nil && !slices.Contains(names, name) {
			e.cur.Store(nil)
			p.sys.Root.Send(g.pid, &retire{})
			changed = true
			p.log.Info("model_generation_retired", "model", name, "generation", g.gen)
		}
	}
	p.models.Store(&next)
	if changed {
		p.structure.Add(1)
		p.publish()
	}
}

func (p *Pylon) spawnGeneration(model string) *generation {
	g := &generation{model: model, gen: p.nextGen.Add(1), done: make(chan struct{}), replies: p.replies}
	agg := stats.NewAggregate(model, g.gen, stats.Options{
		FallbackConcurrency: p.cfg.MaxEngineConcurrency, InitialInputTPS: p.cfg.InitialInputTPS, PinInputTPS: p.cfg.PinInputTPS,
	})
	a := &genActor{g: g, agg: agg, adm: p.cfg.Admission, now: p.now, onChange: p.publish}
	now := p.now()
	a.publish(now) // the first registration already carries the fallback concurrency
	g.pid = p.sys.Root.Spawn(genProps(a))
	return g
}

// publish tells every registrar that the snapshot changed (a no-op for a registrar that
// already has a send pending).
func (p *Pylon) publish() {
	rs := p.registrars.Load()
	if rs == nil {
		return
	}
	for _, r := range *rs {
		r.notify.Notify(p.sys.Root, r.pid)
	}
}

// delivered tells what the gateway with id gatewayID holds of the current state through
// the x-pylon-load headers of its own responses (register.Deps.Delivered): Held when no
// model was added, retired or drained since its last registration and every model's
// current snapshot reached it; Fresh when every model's snapshot reached it within the last
// coalesce interval (its view is as fresh as a change-driven update would make it).
func (p *Pylon) delivered(gatewayID string) register.Delivery {
	p.sentMu.Lock()
	sent, ok := p.sentStructure[gatewayID]
	p.sentMu.Unlock()
	if !ok || sent != p.structure.Load() {
		return register.NotHeld
	}
	result := register.Held
	gw := p.gateways.get(gatewayID)
	recent := p.now().Add(-p.cfg.StatsUpdateCoalesce).UnixNano()
	for _, e := range *p.models.Load() {
		g := e.cur.Load()
		if g == nil {
			continue
		}
		held, at := g.deliveredTo(gw)
		switch {
		case held:
		case at >= recent:
			result = register.Fresh
		default:
			return register.NotHeld
		}
	}
	return result
}

// snapshot is the registration for the gateway with id gatewayID.
func (p *Pylon) snapshot(gatewayID string) control.Registration {
	if gatewayID != "" {
		p.sentMu.Lock()
		p.sentStructure[gatewayID] = p.structure.Load()
		p.sentMu.Unlock()
	}
	status := control.StatusActive
	if p.draining.Load() || p.canaryFailing.Load() {
		status = control.StatusInactive
	}
	reg := control.Registration{
		ID: p.cfg.ID, URL: p.advertiseURL(), ClusterID: p.cfg.ClusterID, DispatchSeq: p.seqOf(gatewayID),
		Models: map[string]control.Model{},
	}
	for name, e := range *p.models.Load() {
		g := e.cur.Load()
		if g == nil {
			continue
		}
		s := g.snapshot(p.sys.Root)
		reg.Models[name] = control.Model{Status: status, Generation: g.gen, Build: s.build, Stats: control.StatsFromLoad(&s.load)}
	}
	return reg
}

func (p *Pylon) advertiseURL() string {
	if p.cfg.AdvertiseURL != "" {
		return p.cfg.AdvertiseURL
	}
	if p.ln != nil {
		return p.scheme() + p.ln.Addr().String()
	}
	return p.scheme() + p.cfg.ListenAddr
}

// update routes a model update to the current generation of model ("" = every model).
func (p *Pylon) update(model string, u stats.Update) {
	send := func(g *generation) {
		u.Generation = g.gen
		p.sys.Root.Send(g.pid, &updated{update: u})
	}
	if model == "" {
		for _, e := range *p.models.Load() {
			if g := e.cur.Load(); g != nil {
				send(g)
			}
		}
		return
	}
	if e := p.lookup([]byte(model)); e != nil {
		if g := e.cur.Load(); g != nil {
			send(g)
		}
	}
}

// EngineStats implements engine.Sink.
func (p *Pylon) EngineStats(model string, ev *stats.RequestEvent) {
	p.update(model, stats.Update{Stats: ev})
}

// EnginePing implements engine.Sink.
func (p *Pylon) EnginePing(model string, r *stats.ConcurrencyReport) {
	p.update(model, stats.Update{Concurrency: r})
}

// EngineKV implements engine.Sink.
func (p *Pylon) EngineKV(model string, kv stats.KVStats) { p.update(model, stats.Update{KV: &kv}) }

// transport performs one control-plane request.
func (p *Pylon) transport(_ context.Context, method, uri, token string, body []byte) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(uri)
	req.Header.SetMethod(method)
	if p.token.Configured() {
		token = p.token.Value()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	if err := p.control.DoTimeout(req, resp, register.DefaultSendTimeout); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), bytes.Clone(resp.Body()), nil
}

// scheme is the data listener's URL scheme and separator.
func (p *Pylon) scheme() string {
	if p.serverTLS != nil {
		return "https://"
	}
	return "http://"
}

// Run serves until ctx is done, then drains: it stops admitting (new requests get a
// retryable 503 and gateways see the models INACTIVE), waits up to DrainTimeout for
// in-flight requests and aborts those still running (see stopServing), then deregisters
// with DELETE and stops the actors.
func (p *Pylon) Run(ctx context.Context) error {
	if p.ln == nil {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", p.cfg.ListenAddr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", p.cfg.ListenAddr, err)
		}
		p.ln = ln
	}
	if p.adminLn == nil && p.cfg.AdminListenAddr != "" {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", p.cfg.AdminListenAddr)
		if err != nil {
			_ = p.ln.Close()
			return fmt.Errorf("listen on %s (--admin-listen-addr): %w", p.cfg.AdminListenAddr, err)
		}
		p.adminLn = ln
	}
	// The configured models first, then the data path: a request for a configured model
	// never meets a pylon that does not know it yet. With --do-calibration the ramp runs
	// next, through the data path and the engine loops, before any registration; the
	// registrars start last and send the full snapshot at once.
	if len(p.cfg.ModelNames) > 0 {
		p.setModels(p.cfg.ModelNames)
	}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		p.engine.Watch(stopWatch)
	}()
	serveErr := make(chan error, 1)
	var dataLn net.Listener = relay.RawListener{Listener: p.ln}
	if p.dataTLS != nil {
		dataLn = tls.NewListener(dataLn, p.dataTLS)
	}
	go func() { serveErr <- p.server.Serve(dataLn) }()
	adminDone := make(chan struct{})
	if p.adminLn != nil {
		var aln net.Listener = relay.RawListener{Listener: p.adminLn}
		if p.serverTLS != nil {
			aln = tls.NewListener(aln, p.serverTLS)
		}
		go func() {
			defer close(adminDone)
			if err := p.admin.Serve(aln); err != nil {
				p.log.Error("admin_listener_failed", "err", err)
			}
		}()
	} else {
		close(adminDone)
	}
	p.log.Info("pylon_serving", "addr", p.ln.Addr().String(), "admin_addr", addrOf(p.adminLn), "tls", p.serverTLS != nil,
		"upstream", p.cfg.UpstreamBaseURL, "gateways", p.cfg.Gateways)

	loops, cancelLoops := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	p.startEngineLoops(loops, &wg)
	var calErr error
	if p.cfg.DoCalibration {
		calErr = p.calibrate(ctx)
	}
	if calErr == nil && ctx.Err() == nil {
		p.startRegistrars(loops, &wg)
		p.startCanaries(loops, &wg)
		if len(p.cfg.ModelNames) == 0 {
			wg.Go(func() { p.discover(loops) })
		}
	}
	runErr := calErr
	if calErr == nil {
		select {
		case <-ctx.Done():
		case runErr = <-serveErr:
			serveErr = nil
		}
	}
	// The admin listener closes alongside the drain (a stopping pylon is not ready).
	adminStopped := make(chan struct{})
	if p.adminLn == nil {
		close(adminStopped)
	} else {
		go func() {
			defer close(adminStopped)
			_ = p.admin.Shutdown()
			_ = p.adminLn.Close() // in case Serve had not started: it then returns at once
		}()
	}
	runErr = errors.Join(runErr, p.stopServing(serveErr))
	// Every handler is done (or abandoned): nothing sends to the actors any more but the
	// engine loops, which stop next.
	cancelLoops()
	wg.Wait()
	p.deregister()
	p.stopGenerations()
	close(stopWatch)
	<-watched
	<-adminStopped
	<-adminDone
	p.control.CloseIdleConnections()
	p.client.CloseIdleConnections()
	p.sys.Shutdown()
	return runErr
}

// startRegistrars starts one registrar per gateway (each sends the full snapshot at once):
// the --gateway URLs and, with --gateway-dns, every address the name resolves to, followed
// by a loop (until ctx ends) that re-resolves it and adds and removes registrars.
func (p *Pylon) startRegistrars(ctx context.Context, wg *sync.WaitGroup) {
	p.regMu.Lock()
	p.regs = map[string]registrarRef{}
	for _, gw := range p.cfg.Gateways {
		p.regs[gw] = p.spawnRegistrar(gw)
	}
	p.storeRegistrars()
	p.regMu.Unlock()
	if p.cfg.GatewayDNS == "" {
		return
	}
	p.resolveGateways(ctx)
	wg.Go(func() { actors.Every(ctx, p.cfg.GatewayDNSInterval, func() { p.resolveGateways(ctx) }) })
}

// resolveGateways makes the registrars of --gateway-dns match its current addresses. A
// failed lookup keeps the current set.
func (p *Pylon) resolveGateways(ctx context.Context) {
	scheme, host, port, _ := splitGatewayDNS(p.cfg.GatewayDNS)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	addrs, err := p.lookupHost(lctx, host)
	cancel()
	if err != nil {
		p.log.Warn("gateway_dns_lookup_failed", "name", p.cfg.GatewayDNS, "err", err)
		return
	}
	want := map[string]bool{}
	for _, gw := range p.cfg.Gateways {
		want[gw] = true
	}
	for _, a := range addrs {
		want[scheme+"://"+net.JoinHostPort(a, port)] = true
	}
	p.regMu.Lock()
	var gone []string
	for gw := range p.regs {
		if !want[gw] {
			gone = append(gone, gw)
		}
	}
	for gw := range want {
		if _, ok := p.regs[gw]; !ok {
			p.regs[gw] = p.spawnRegistrar(gw)
			p.log.Info("gateway_discovered", "gateway", gw)
		}
	}
	for _, gw := range gone {
		r := p.regs[gw]
		delete(p.regs, gw)
		_ = p.sys.Root.PoisonFuture(r.pid).Wait()
		r.connected.Set(0)
		p.log.Info("gateway_vanished", "gateway", gw)
	}
	p.storeRegistrars()
	p.regMu.Unlock()
	for _, gw := range gone { // best effort: a vanished replica is usually gone for good
		status, _, err := p.transport(ctx, "DELETE", gw+control.RegistrationPath+p.cfg.ID, p.cfg.ControlToken, nil)
		p.log.Debug("deregistered", "gateway", gw, "status", status, "err", err)
	}
}

// storeRegistrars publishes regs for publish (under regMu).
func (p *Pylon) storeRegistrars() {
	rs := make([]registrarRef, 0, len(p.regs))
	for _, r := range p.regs {
		rs = append(rs, r)
	}
	p.registrars.Store(&rs)
}

// spawnRegistrar starts the registrar of gateway URL gw.
func (p *Pylon) spawnRegistrar(gw string) registrarRef {
	router := escape(gw)
	connected := p.metrics.gauge(mRegistrationConn + `{router="` + router + `"}`)
	notify := &register.Notifier{}
	pid := p.sys.Root.Spawn(register.Props(
		register.Config{GatewayURL: gw, ID: p.cfg.ID, Token: p.cfg.ControlToken, Heartbeat: p.cfg.MinUpdateInterval, Coalesce: p.cfg.StatsUpdateCoalesce},
		register.Deps{
			Snapshot: p.snapshot, Transport: p.transport, Now: p.now, Logger: p.log, Notifier: notify, Delivered: p.delivered,
			OnConnected: func(ok bool) {
				if ok {
					connected.Set(1)
				} else {
					connected.Set(0)
				}
			},
		}))
	return registrarRef{pid: pid, notify: notify, gateway: gw, connected: connected}
}

// Shutdown timing.
const (
	drainPoll = 10 * time.Millisecond
	// abortGrace bounds each wait after the drain deadline: for the handlers to finish once
	// their engine connections are closed, then once their client connections are closed.
	abortGrace = time.Second
)

// errHandlersAbandoned is returned by Run when handlers were still running after the
// abort; the actors were stopped regardless.
var errHandlersAbandoned = errors.New("pylon shutdown: handlers still running after the drain timeout and abort were abandoned")

// stopServing drains the data path within DrainTimeout, then stops it whatever is left:
//  1. draining: models INACTIVE, new requests get a retryable 503, in-flight ones continue;
//     when none is left (or at the deadline) the listener closes and idle connections are
//     closed (fasthttp's ShutdownWithContext, which waits for the open ones);
//  2. at the deadline, every engine connection is closed: a handler waiting for the
//     engine answers 503 and a relayed stream is cut;
//  3. after abortGrace, every client connection still open is closed (a client that does
//     not read, or is still sending its body);
//  4. after another abortGrace the remaining handlers are abandoned (logged, error).
//
// serveErr is Serve's result channel (nil when Serve has already returned).
func (p *Pylon) stopServing(serveErr <-chan error) error {
	p.draining.Store(true)
	p.structure.Add(1)
	p.publish() // models INACTIVE
	deadline := time.Now().Add(p.cfg.DrainTimeout)
	for p.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(drainPoll)
	}
	stopped := make(chan error, 1)
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { stopped <- p.server.ShutdownWithContext(sctx) }()
	// wait reports whether the server stopped within d, and its result.
	wait := func(d time.Duration) (bool, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case err := <-stopped:
			return true, err
		case <-t.C:
			select { // both ready: prefer the clean outcome
			case err := <-stopped:
				return true, err
			default:
				return false, nil
			}
		}
	}
	ok, err := wait(time.Until(deadline))
	if !ok {
		p.log.Warn("drain_timeout_aborting_engine_calls", "inflight", p.inflight.Load(), "engine_connections", p.engine.Abort())
		ok, err = wait(abortGrace)
	}
	if !ok {
		p.log.Warn("drain_timeout_closing_client_connections", "inflight", p.inflight.Load(), "connections", p.clients.closeAll())
		ok, err = wait(abortGrace)
	}
	if !ok {
		cancel()
		p.log.Error("drain_timeout_handlers_abandoned", "inflight", p.inflight.Load(), "err", <-stopped)
		err = errHandlersAbandoned
	}
	if serveErr != nil {
		err = errors.Join(err, <-serveErr)
	}
	return err
}

// deregister stops the registrars and sends DELETE to every gateway (the DNS loop has
// stopped: no registrar starts any more).
func (p *Pylon) deregister() {
	p.regMu.Lock()
	regs := p.regs
	p.regs = nil
	p.regMu.Unlock()
	for _, r := range regs {
		_ = p.sys.Root.PoisonFuture(r.pid).Wait()
	}
	for gw := range regs {
		status, _, err := p.transport(context.Background(), "DELETE", gw+control.RegistrationPath+p.cfg.ID, p.cfg.ControlToken, nil)
		p.log.Info("deregistered", "gateway", gw, "status", status, "err", err)
	}
}

// stopGenerations stops every model generation actor.
func (p *Pylon) stopGenerations() {
	for _, e := range *p.models.Load() {
		if g := e.cur.Load(); g != nil {
			_ = p.sys.Root.StopFuture(g.pid).Wait()
		}
	}
}

func (p *Pylon) startEngineLoops(ctx context.Context, wg *sync.WaitGroup) {
	base := p.cfg.UpstreamBaseURL
	if p.cfg.EngineStatsStream != engine.ModeOff {
		// Not on the data path's relay.Conns: the stats stream is long-lived and may idle.
		streamClient := &fasthttp.HostClient{
			Addr: p.upstreamHost, Dial: p.dial, MaxIdleConnDuration: time.Second,
			IsTLS: p.client.IsTLS, TLSConfig: p.client.TLSConfig,
		}
		connected := p.metrics.gauge(mStreamConnected + `{mode="` + p.cfg.EngineStatsStream + `"}`)
		s := &engine.StatsStream{
			Client: streamClient, BaseURL: base, Path: p.cfg.EngineStatsStreamPath, Mode: p.cfg.EngineStatsStream,
			Sink: p, Logger: p.log, Metrics: engine.StreamMetrics{Set: p.metrics.set, Prefix: p.cfg.MetricsPrefix},
			OnConnected: func(ok bool) {
				if ok {
					connected.Set(1)
				} else {
					connected.Set(0)
				}
			},
		}
		wg.Go(func() {
			_ = s.Run(ctx)
			streamClient.CloseIdleConnections()
		})
	}
	if p.cfg.KVCacheStatsPath != "" {
		kv := &engine.Poller{Client: p.client, BaseURL: base, Path: p.cfg.KVCacheStatsPath, Sink: p, Logger: p.log}
		wg.Go(func() { kv.Run(ctx) })
	}
	if d := p.cfg.EngineMetrics; d == engine.DialectVLLM || d == engine.DialectSGLang {
		sc := &engine.Poller{
			Client: p.client, BaseURL: base, Path: "/metrics", Sink: p, Logger: p.log, Dialect: d,
			Metrics: engine.StreamMetrics{Set: p.metrics.set, Prefix: p.cfg.MetricsPrefix}, Now: p.now,
		}
		p.eng.mu.Lock()
		p.eng.poller = sc
		p.eng.mu.Unlock()
		wg.Go(func() { sc.Run(ctx) })
	}
	if len(p.cfg.ModelNames) > 0 { // discovered names are the engine's own
		wg.Go(func() { p.watchServedModels(ctx) })
	}
}

type modelList struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
}

// discover polls GET /v1/models and applies the list (first poll retried every 500 ms).
func (p *Pylon) discover(ctx context.Context) {
	polls := func(outcome string) {
		p.metrics.counter(mDiscoveryPolls + `{provider="openai",outcome="` + outcome + `"}`).Inc()
	}
	count := p.metrics.gauge(mDiscoveryModels + `{provider="openai"}`)
	interval := 500 * time.Millisecond
	for {
		names, err := p.listModels()
		if err != nil {
			polls("error")
			p.log.Debug("model_discovery_failed", "err", err)
		} else {
			polls("ok")
			count.Set(float64(len(names)))
			p.setModels(names)
			interval = p.cfg.DiscoveryPollInterval
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (p *Pylon) listModels() ([]string, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.cfg.UpstreamBaseURL + "/v1/models")
	if err := p.client.DoTimeout(req, resp, 5*time.Second); err != nil {
		return nil, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("GET /v1/models: status %d", resp.StatusCode())
	}
	var l modelList
	if err := json.Unmarshal(resp.Body(), &l); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	names := make([]string, 0, len(l.Data))
	for _, m := range l.Data {
		if m.ID != "" && !slices.Contains(names, m.ID) {
			names = append(names, m.ID)
		}
	}
	return names, nil
}

// Package pylon is the sidecar next to one inference engine (docs/pylon.md): it relays
// the gateway's requests to the engine over fasthttp while observing the stream, runs
// local queue admission, keeps one protoactor actor per model generation with the
// per-model aggregate, ingests the engine's own stats, and registers the full snapshot
// with every gateway through one registrar actor each.
//
// Where things are: pylon.go builds a Pylon and runs it (New, Run); handler.go is the data
// path; models.go the set of served models and their generation actors (generation.go);
// modeldiscovery.go polls the engine's /v1/models when no names are configured;
// enginestats.go the loops that read the engine's own stats and route them to the
// generations; registration.go what a gateway is told (snapshot, delivered) and how
// (transport); registrars.go the registrar actor per gateway, from --gateway and
// --gateway-dns; gateways.go the dispatch seqs per gateway; shutdown.go the drain.
// docs/architecture.md places the pylon among the other actors; docs/wire.md is what it
// says to gateways.
package pylon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/internal/handoff"
	"github.com/switchyard/switchyard/internal/headerset"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/secret"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/pylon/register"
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
	// Tracer records an OpenTelemetry span per relayed request (tracing.go); nil =
	// tracing off.
	Tracer Tracer
	// ClientGone tells whether a request's client has closed its connection (polled while
	// a request is held back for its slot share); nil: relay.PeerClosed on the connection.
	ClientGone func(ctx *fasthttp.RequestCtx) bool
}

// Pylon is one sidecar instance.
type Pylon struct {
	cfg Config
	log *slog.Logger // component=pylon
	// baseLog is Deps.Logger, for the parts that name their own component (the actor
	// system, registrars): a second component attribute would repeat the key.
	baseLog *slog.Logger
	now     func() time.Time
	sys     *actor.ActorSystem
	metrics *pylonMetrics
	// prompts are the affinity keys whose prompt the engine is prefilling (nil: --prompt-wait 0).
	prompts *promptTable
	// promptAtHeaders: a prompt counts as cached at its response headers (--prompt-cached-at).
	promptAtHeaders bool

	client       *fasthttp.HostClient
	engine       *relay.Conns // the client's connections: timeouts and shutdown abort
	dial         fasthttp.DialFunc
	clients      *clientConns    // the server's connections
	handoff      *handoff.Server // streams relayed off the server's goroutines
	control      *fasthttp.Client
	upstreamHost string

	// controlTransport sends the registrars' requests on control (register.HTTPTransport).
	controlTransport register.Transport

	// upstreamScheme is the engine's URL scheme: every relayed request gets it (one from a
	// TLS gateway connection arrives as https).
	upstreamScheme string
	fromEngine     *headerset.Set // removed from engine responses (fromEngineSet)
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
	// gensStopped is set (under replMu) once the generations are being stopped: a failed
	// one is no longer replaced; replacing tracks the replacements under way.
	replMu      sync.Mutex
	gensStopped bool
	replacing   sync.WaitGroup
	// genFault is a test-only hook every generation actor runs on each message.
	genFault atomic.Pointer[faultHook]

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
	held       atomic.Int64 // requests held back for the slot share now (slotshare.go)
	// eng is what the pylon knows of the engine beyond the data path: served names,
	// the metrics scrape's model mapping, canary outcomes (enginemodels.go).
	eng engineState
	// tracer is Deps.Tracer (nil: tracing off).
	tracer Tracer
	// clientGone is Deps.ClientGone (default peerClosed).
	clientGone func(ctx *fasthttp.RequestCtx) bool
	// engineSilent is set while the engine liveness watch finds the engine unresponsive
	// (watchEngine): requests are answered 503 retryable without being sent to it.
	engineSilent atomic.Bool
	// canaryKick asks the canary loop for a round now (kickCanaries).
	canaryKick chan struct{}
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
		cfg: cfg, log: deps.Logger.With("component", "pylon"), baseLog: deps.Logger, now: deps.Now,
		metrics: newPylonMetrics(cfg.MetricsPrefix, cfg.ID, deps.Version, cfg.MetricsReferenceNames), upstreamHost: u.Host, upstreamScheme: u.Scheme,
		sentStructure: map[string]uint64{}, ln: deps.Listener, adminLn: deps.AdminListener, fromEngine: fromEngineSet(cfg.UpstreamRetryHeader),
		replies:    newReplyPool(),
		lookupHost: deps.LookupHost,
		tracer:     deps.Tracer,
		clientGone: deps.ClientGone,
		canaryKick: make(chan struct{}, 1),
		prompts:    newPromptTable(cfg.PromptWait),

		promptAtHeaders: cfg.PromptCachedAt == PromptCachedAtHeaders,
	}
	p.metrics.set.GetOrCreateGauge(cfg.MetricsPrefix+mPromptsInflight, func() float64 { return float64(p.prompts.size()) })
	p.metrics.set.GetOrCreateGauge(cfg.MetricsPrefix+mShareHeld, func() float64 { return float64(p.held.Load()) })
	p.metrics.set.GetOrCreateGauge(cfg.MetricsPrefix+mEngineUnresponsiveNow, func() float64 {
		if p.engineSilent.Load() {
			return 1
		}
		return 0
	})
	if p.lookupHost == nil {
		p.lookupHost = net.DefaultResolver.LookupHost
	}
	if p.clientGone == nil {
		p.clientGone = peerClosed
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
	if cfg.NoRawSocketIO {
		p.engine.PlainIO() // --raw-socket-io=false: net.Conn's own reads and writes
	}
	p.clients = newClientConns()
	p.client = &fasthttp.HostClient{
		Addr: u.Host, IsTLS: u.Scheme == "https", TLSConfig: clientTLS,
		DialTimeout: p.engine.DialTimeout, MaxConns: relay.UpstreamConnCap(cfg.ServerLimits.WithDefaults().MaxConnections), MaxConnWaitTimeout: 5 * time.Second,
		ReadBufferSize:      relay.EngineReadBuffer,
		MaxIdleConnDuration: 4 * time.Second, NoDefaultUserAgentHeader: true,
		RetryIfErr: func(_ *fasthttp.Request, attempts int, err error) (bool, bool) {
			// A reused keep-alive connection the engine already closed: safe to resend once.
			return false, attempts < 2 && errors.Is(err, fasthttp.ErrConnectionClosed)
		},
	}
	p.control = &fasthttp.Client{Dial: dial, TLSConfig: clientTLS, NoDefaultUserAgentHeader: true, MaxIdleConnDuration: 10 * time.Second}
	p.controlTransport = register.HTTPTransport(p.control, p.fileToken)
	p.server = p.newServer("switchyard-pylon")
	p.server.CloseOnShutdown, p.server.ConnState = true, p.clients.state
	p.handoff = handoff.New(p.server, nil)
	p.metrics.set.GetOrCreateGauge(cfg.MetricsPrefix+mStreamsRelayed, func() float64 { return float64(p.handoff.Streams()) })
	p.admin = &fasthttp.Server{
		Handler: p.serveAdmin, Name: "switchyard-pylon-admin", NoDefaultServerHeader: true, CloseOnShutdown: true,
		MaxRequestBodySize: 1 << 10, Logger: fasthttpLogger{p.log},
	}
	// Header, body and idle timeouts and the connection cap on both listeners; request
	// bodies are read against the limits as they arrive. No write timeout: a relayed
	// stream may last as long as the engine generates.
	httpserver.Apply(p.server, cfg.ServerLimits, p.dataTLS != nil)
	httpserver.Apply(p.admin, cfg.ServerLimits, p.serverTLS != nil)
	p.sys = actors.NewSystem(p.baseLog)
	return p, nil
}

// newServer is a data-path server: the handler, the body limit and problem+json answers
// for requests fasthttp cannot read (a body over the limit gets 413).
func (p *Pylon) newServer(name string) *fasthttp.Server {
	return &fasthttp.Server{
		Handler: p.serve, Name: name, NoDefaultServerHeader: true, NoDefaultContentType: true,
		MaxRequestBodySize: p.cfg.MaxRequestBodyBytes, Logger: fasthttpLogger{p.log}, WriteBufferSize: relay.ClientWriteBuffer,
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

// fasthttpLogger sends fasthttp's own messages to the pylon's logger at Debug.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug("fasthttp", "detail", fmt.Sprintf(format, args...))
}

// addrOf is ln's address, "" for none.
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
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		p.watchEngine(stopWatch)
	}()
	serveErr := make(chan error, 1)
	dataLn := relay.Listener(p.ln, !p.cfg.NoRawSocketIO, p.cfg.ServerLimits.WriteStall())
	if p.dataTLS != nil {
		dataLn = tls.NewListener(dataLn, p.dataTLS)
	}
	go func() { serveErr <- p.server.Serve(handoff.Listener(dataLn)) }()
	adminDone := make(chan struct{})
	if p.adminLn != nil {
		aln := relay.Listener(p.adminLn, !p.cfg.NoRawSocketIO, p.cfg.ServerLimits.WriteStall())
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
	if err := relay.DetachSupported(); err != nil {
		p.log.Warn("streams_unobserved", "err", err, "detail", "the engine's streamed answers are read whole before they are relayed")
	}

	loops, cancelLoops := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	p.startEngineLoops(loops, &wg)
	var calErr error
	if p.cfg.WaitForUpstream > 0 {
		calErr = p.waitForUpstream(ctx)
	}
	if calErr == nil && p.cfg.DoCalibration {
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
	<-checked
	<-adminStopped
	<-adminDone
	p.control.CloseIdleConnections()
	p.client.CloseIdleConnections()
	p.sys.Shutdown()
	return runErr
}

// Package gateway is the Switchyard router: the OpenAI-compatible front end, the control
// endpoint where pylons register, and the streaming proxy with retries. Routing decisions
// live in the pure packages lb, lbconfig and engines/load; backend and scheduler actors in
// fleet and dispatch. docs/architecture.md maps the actors, their messages and a
// request's path through them.
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/gateway/lbconfig"
	"github.com/switchyard/switchyard/internal/handoff"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/secret"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/internal/wire"
)

// Defaults of Config (a zero field means the default).
const (
	DefaultListenAddr          = "127.0.0.1:8000"
	DefaultAdminListenAddr     = "127.0.0.1:8001"
	DefaultMaxAdminBodyBytes   = 1 << 20
	DefaultMaxConnectRetries   = 2
	DefaultMaxRequestRetries   = 2
	DefaultMaxReplayBodyBytes  = 64 << 20
	DefaultRetryBudgetHeader   = "x-stargate-max-wait-ms"
	DefaultHealthProbeInterval = time.Second
	DefaultHeartbeat           = time.Second
	DefaultMetricsPrefix       = "switchyard_"
	DefaultDrainTimeout        = 30 * time.Second
	DefaultProbeTimeout        = 2 * time.Second
	DefaultHeadersTimeout      = 30 * time.Second
	DefaultReloadPoll          = time.Second
	DefaultMinExpiry           = 3 * time.Second
	// The first-byte deadline of an attempt (see Config.FirstByteTimeoutFactor).
	DefaultFirstByteTimeoutFloor  = 2 * time.Second
	DefaultFirstByteTimeoutFactor = 4.0
	// Passive health (outlier ejection), see Config.OutlierConsecutiveFailures.
	DefaultOutlierConsecutiveFailures = fleet.DefaultConsecutiveFailures
	DefaultOutlierBaseEjection        = fleet.DefaultBaseEjection
	DefaultOutlierMaxEjection         = fleet.DefaultMaxEjection
	DefaultOutlierMaxEjectionPercent  = fleet.DefaultMaxEjectionPercent
)

// NoRetries is the Config.MaxConnectRetries or MaxRequestRetries that turns those retries
// off. The two counts have one encoding: 0 means the default, a negative value
// (NoRetries) none, any other value that many.
const NoRetries = -1

// Config is the gateway's configuration. Zero fields take the defaults above (a zero
// retry count too: see NoRetries).
type Config struct {
	// ListenAddr is the public listener: the OpenAI API, /healthz and /readyz only.
	ListenAddr string
	// AdminListenAddr is the admin listener: the control endpoint pylons register on,
	// /metrics, /debug/state and pprof.
	AdminListenAddr string
	// ControlToken (or ControlTokenFile, re-read on change) is the bearer token every admin
	// request must present; with neither, the admin listener must be on a loopback address
	// unless InsecureNoControlAuth.
	ControlToken          string
	ControlTokenFile      string
	InsecureNoControlAuth bool
	// WorkerCredentialsFile holds per-pylon registration credentials, "<inference-server-id>
	// <token>" per line ("*": any pylon), re-read on change: a registration (PUT, PATCH or DELETE
	// of wire.RegistrationPath + id) is accepted with a token listed for its id, or with
	// the control token. Other admin paths still need the control token.
	WorkerCredentialsFile string
	// MetricsNoAuth serves the admin /metrics without the token; PublicMetrics also serves
	// /metrics on the public listener.
	MetricsNoAuth bool
	PublicMetrics bool
	// MaxAdminBodyBytes bounds a registration body (0 = DefaultMaxAdminBodyBytes).
	MaxAdminBodyBytes int
	// MaxModelsPerBackend bounds the models one registration may name (0 = 256).
	MaxModelsPerBackend int
	// TargetCollectGrace is how long a routing target whose last backend left keeps its
	// scheduler before it is collected (0 = 30 s).
	TargetCollectGrace time.Duration
	// TLS, when its certificate is set, serves both listeners over TLS (the pair re-read on
	// change); AdminClientCAFile then requires pylons to present a client certificate
	// signed by that CA on the admin listener.
	TLS               tlsx.ServerOptions
	AdminClientCAFile string
	// UpstreamTLS verifies pylons registered with an https URL (and presents a client
	// certificate to them when one is set).
	UpstreamTLS tlsx.ClientOptions
	// GatewayID names this replica to pylons (dispatch sequences); default random.
	GatewayID    string
	LBConfigPath string
	// MaxConnectRetries bounds a request's retries after transport failures (and pylons
	// that cannot reach their engine), MaxRequestRetries those after retryable 429/503
	// answers: 0 means the default (2), NoRetries none. The policy: package retry.
	MaxConnectRetries      int
	MaxRequestRetries      int
	MaxReplayBodyBytes     int
	RequirePylonRetrySig   bool
	NoRequirePylonRetrySig bool
	RetryBudgetHeader      string
	NoRetryBudgetHeader    bool
	HealthProbeInterval    time.Duration
	Heartbeat              time.Duration
	// MinExpiry: a backend expires after 3 missed heartbeats, but never sooner than this.
	MinExpiry     time.Duration
	MetricsPrefix string
	DrainTimeout  time.Duration
	// ShutdownDelay keeps serving (with /readyz answering 503) this long after a shutdown
	// starts, so load balancers stop sending before the listener closes. Default 0.
	ShutdownDelay time.Duration
	// StartupGrace: for this long after the gateway starts, a request for a routing target
	// that no backend has registered yet waits for one instead of failing at once (404
	// no_eligible_candidates): after a restart the pylons register again only with their
	// next heartbeat, or after a backoff of about a second (startup.go). 0 (the Config's
	// default; the binary's is 3 s): no wait.
	StartupGrace time.Duration
	ProbeTimeout time.Duration
	// EnablePprof serves Go's profiles under /debug/pprof/ (operators only).
	EnablePprof bool
	// NoRawSocketIO makes the client, admin and upstream connections read and write
	// through net.Conn's own calls instead of raw syscalls (--raw-socket-io=false; see
	// internal/relay/rawio.go). Timeouts and deadlines work the same either way.
	NoRawSocketIO bool
	// HeadersTimeout bounds the wait for an upstream's response headers.
	HeadersTimeout time.Duration
	// FirstByteTimeoutFactor and FirstByteTimeoutFloor make each attempt of a streamed
	// request wait for the pylon's first response byte at most factor × the backend's TTFT
	// estimate, at least the floor, at most HeadersTimeout; past it the attempt is
	// abandoned (its connection closed) and retried on another backend (defaults 4 and
	// 2 s; a negative factor turns the deadline off).
	FirstByteTimeoutFactor float64
	FirstByteTimeoutFloor  time.Duration
	// Passive health: OutlierConsecutiveFailures failures in a row (connect failures,
	// first-byte timeouts, a pylon whose engine is unreachable, failed health probes)
	// eject a backend for OutlierBaseEjection, doubling with each ejection in a row up to
	// OutlierMaxEjection; a successful request resets it. OutlierMaxEjectionPercent bounds
	// the share of a routing target's backends out at once (at least one). Defaults 3,
	// 1 s, 30 s, 50 %; a negative OutlierConsecutiveFailures turns ejection off.
	OutlierConsecutiveFailures int
	OutlierBaseEjection        time.Duration
	OutlierMaxEjection         time.Duration
	OutlierMaxEjectionPercent  int
	// ClusterBackends is how a request picks the backend of its chosen cluster:
	// dispatch.ClusterBackendsSpread ("" too) or dispatch.ClusterBackendsLead.
	ClusterBackends string
	// ServerLimits are both listeners' connection limits: header, body and idle timeouts,
	// the connection cap and the memory large request bodies may hold (zero fields: the
	// defaults of package httpserver).
	ServerLimits httpserver.Limits
	// LegacyInputWorkErrorCode answers input-work admission rejections with the error code
	// input_work_limit_exceeded, as older gateways did, instead of overloaded_error (the
	// code of every load-shedding 503).
	LegacyInputWorkErrorCode bool
	// ReloadPoll is how often the lb-config file is checked for changes (0 = default).
	ReloadPoll time.Duration
	// AccessLogSample is the share of requests (0–1, chosen at random) written to the
	// access log, one `access` record each at info; AccessLogErrors also writes every
	// request answered with a status other than 2xx. Both off by default (accesslog.go).
	AccessLogSample float64
	AccessLogErrors bool
	// Seed seeds the balancers' randomness, mixed with GatewayID (replicaSeed).
	Seed uint64
	// SeriesRetention is how long the metric series of a backend or cluster that left the
	// fleet, and of a routing target no backend serves, are kept before they are dropped
	// (seriessweep.go; 0 = DefaultSeriesRetention, < 0 = kept for as long as the process
	// runs).
	SeriesRetention time.Duration
}

func (c *Config) withDefaults() Config {
	out := *c
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if out.ListenAddr == "" {
		out.ListenAddr = DefaultListenAddr
	}
	if out.AdminListenAddr == "" {
		out.AdminListenAddr = DefaultAdminListenAddr
	}
	if out.MaxAdminBodyBytes == 0 {
		out.MaxAdminBodyBytes = DefaultMaxAdminBodyBytes
	}
	if out.MaxConnectRetries == 0 {
		out.MaxConnectRetries = DefaultMaxConnectRetries
	}
	if out.MaxRequestRetries == 0 {
		out.MaxRequestRetries = DefaultMaxRequestRetries
	}
	if out.MaxReplayBodyBytes == 0 {
		out.MaxReplayBodyBytes = DefaultMaxReplayBodyBytes
	}
	out.RequirePylonRetrySig = !out.NoRequirePylonRetrySig
	if out.RetryBudgetHeader == "" && !out.NoRetryBudgetHeader {
		out.RetryBudgetHeader = DefaultRetryBudgetHeader
	}
	set(&out.HealthProbeInterval, DefaultHealthProbeInterval)
	set(&out.Heartbeat, DefaultHeartbeat)
	set(&out.DrainTimeout, DefaultDrainTimeout)
	set(&out.ProbeTimeout, DefaultProbeTimeout)
	set(&out.HeadersTimeout, DefaultHeadersTimeout)
	set(&out.FirstByteTimeoutFloor, DefaultFirstByteTimeoutFloor)
	if out.FirstByteTimeoutFactor == 0 {
		out.FirstByteTimeoutFactor = DefaultFirstByteTimeoutFactor
	}
	if out.OutlierConsecutiveFailures == 0 {
		out.OutlierConsecutiveFailures = DefaultOutlierConsecutiveFailures
	}
	set(&out.OutlierBaseEjection, DefaultOutlierBaseEjection)
	set(&out.OutlierMaxEjection, DefaultOutlierMaxEjection)
	if out.OutlierMaxEjectionPercent == 0 {
		out.OutlierMaxEjectionPercent = DefaultOutlierMaxEjectionPercent
	}
	set(&out.ReloadPoll, DefaultReloadPoll)
	set(&out.SeriesRetention, DefaultSeriesRetention)
	set(&out.MinExpiry, DefaultMinExpiry)
	out.ServerLimits = out.ServerLimits.WithDefaults()
	if out.MetricsPrefix == "" {
		out.MetricsPrefix = DefaultMetricsPrefix
	}
	if out.GatewayID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		out.GatewayID = "gw-" + hex.EncodeToString(b[:])
	}
	return out
}

// Validate returns one precise message per bad field.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxReplayBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("proxy-max-replay-body-bytes %d must be > 0", c.MaxReplayBodyBytes))
	}
	if c.HealthProbeInterval < 0 {
		errs = append(errs, fmt.Errorf("health-probe-interval %v must be > 0", c.HealthProbeInterval))
	}
	admin := c.AdminListenAddr
	if admin == "" {
		admin = DefaultAdminListenAddr
	}
	if c.ControlToken == "" && c.ControlTokenFile == "" && !c.InsecureNoControlAuth && !IsLoopback(admin) {
		errs = append(errs, fmt.Errorf("the admin listener %s is not on a loopback address and no control token is configured: "+
			"anyone who reaches it could register backends and take over traffic; set --control-token-file (or --control-token), "+
			"or pass --insecure-no-control-auth to run it without authentication", admin))
	}
	if c.MaxModelsPerBackend < 0 {
		errs = append(errs, fmt.Errorf("max-models-per-backend %d must be >= 0", c.MaxModelsPerBackend))
	}
	if c.StartupGrace < 0 {
		errs = append(errs, fmt.Errorf("startup-grace %v must be >= 0", c.StartupGrace))
	}
	if c.TargetCollectGrace < 0 {
		errs = append(errs, fmt.Errorf("target-collect-grace %v must be >= 0", c.TargetCollectGrace))
	}
	if f := c.FirstByteTimeoutFactor; math.IsNaN(f) || math.IsInf(f, 0) {
		errs = append(errs, fmt.Errorf("first-byte-timeout-factor %v must be a finite number", f))
	}
	if c.FirstByteTimeoutFloor < 0 {
		errs = append(errs, fmt.Errorf("first-byte-timeout-floor %v must be >= 0", c.FirstByteTimeoutFloor))
	}
	if c.OutlierBaseEjection < 0 || c.OutlierMaxEjection < 0 || (c.OutlierMaxEjection > 0 && c.OutlierBaseEjection > c.OutlierMaxEjection) {
		errs = append(errs, fmt.Errorf("outlier-base-ejection %v and outlier-max-ejection %v must be >= 0, the base at most the max",
			c.OutlierBaseEjection, c.OutlierMaxEjection))
	}
	if b := c.ClusterBackends; b != "" && b != dispatch.ClusterBackendsSpread && b != dispatch.ClusterBackendsLead {
		errs = append(errs, fmt.Errorf("cluster-backends %q must be %s or %s", b, dispatch.ClusterBackendsSpread, dispatch.ClusterBackendsLead))
	}
	if c.OutlierMaxEjectionPercent < 0 || c.OutlierMaxEjectionPercent > 100 {
		errs = append(errs, fmt.Errorf("outlier-max-ejection-percent %d must be within 0–100", c.OutlierMaxEjectionPercent))
	}
	if f := c.AccessLogSample; !(f >= 0 && f <= 1) {
		errs = append(errs, fmt.Errorf("access-log-sample %v must be within 0–1", f))
	}
	if err := c.ServerLimits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MetricsPrefix != "" && !validMetricPrefix(c.MetricsPrefix) {
		errs = append(errs, fmt.Errorf("metrics-prefix %q must match [a-zA-Z_][a-zA-Z0-9_]*", c.MetricsPrefix))
	}
	return errors.Join(errs...)
}

// IsLoopback reports whether a listen address binds only loopback interfaces (127.0.0.0/8,
// ::1 or "localhost"); an empty host binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func validMetricPrefix(p string) bool {
	for i, r := range p {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// Deps are the gateway's dependencies.
type Deps struct {
	Now    func() time.Time
	Logger *slog.Logger
	// Dial connects to a backend address (tests: in-memory listeners); nil = TCP.
	Dial fasthttp.DialFunc
	// Tracer records OpenTelemetry spans of routed requests (gateway/tracing.go); nil =
	// tracing off.
	Tracer Tracer
}

// Gateway is one router instance.
type Gateway struct {
	cfg                  Config
	deps                 Deps
	log                  *slog.Logger
	sys                  *actor.ActorSystem
	dir                  *dispatch.Directory
	exprs                exprCache // parsed routing expressions (expression.go)
	pending              dispatch.PendingPool
	upstream             *relay.Conns    // every pylon connection, for the headers timeout
	handoff              *handoff.Server // event streams relayed off the server's goroutines (stream.go)
	stopWatch, watchDone chan struct{}
	stopSweep            context.CancelFunc // stops the series sweep (seriessweep.go)
	sweepDone            chan struct{}      // the series sweep has returned
	fleet                *fleet.Fleet
	lbcfg                atomic.Pointer[lbconfig.Config]
	lastResolved         atomic.Pointer[resolved]
	lbMtime              time.Time
	started              time.Time // when New ran (the start of Config.StartupGrace)
	metrics              *gatewayMetrics
	server               *fasthttp.Server // public listener
	admin                *fasthttp.Server // admin listener
	token                *secret.Token
	workers              *secret.Workers
	serverTLS            *tls.Config // both listeners; nil = plain
	adminTLS             *tls.Config // serverTLS plus the client-certificate check, if any
	upstreamTLS          *tls.Config
	listeners            listenerSet
	limits               wire.Limits // what a registration may hold
	ack                  []byte      // the answer to an accepted registration (a wire.RegistrationAck)
	draining             atomic.Bool
	idSeq                atomic.Uint64
	idPrefix             string
	access               accessLog
}

// New builds a gateway; it loads the lb-config file when one is configured.
func New(cfg Config, deps Deps) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, deps: deps, log: deps.Logger.With("component", "gateway"), metrics: newMetrics(cfg.MetricsPrefix), started: deps.Now()}
	g.idPrefix = cfg.GatewayID + "-"
	g.access = newAccessLog(&cfg, g.log)
	if err := g.setUpSecurity(); err != nil {
		return nil, err
	}
	lc := lbconfig.Default()
	if cfg.LBConfigPath != "" {
		c, err := loadLBConfig(cfg.LBConfigPath)
		if err != nil {
			return nil, err
		}
		lc = c
		if st, err := os.Stat(cfg.LBConfigPath); err == nil {
			g.lbMtime = st.ModTime()
		}
	}
	g.lbcfg.Store(lc)
	g.sys = actors.NewSystem(deps.Logger)
	g.upstream = g.newUpstreamConns()
	g.stopWatch, g.watchDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(g.watchDone)
		g.upstream.Watch(g.stopWatch)
	}()
	g.limits = wire.Limits{MaxModels: cfg.MaxModelsPerBackend, MaxBodyBytes: cfg.MaxAdminBodyBytes}
	g.ack, _ = json.Marshal(wire.RegistrationAck{GatewayID: cfg.GatewayID, HeartbeatMs: uint64(max(cfg.Heartbeat.Milliseconds(), 0)), LoadUpdates: true})
	g.dir = dispatch.NewDirectory(g.sys, dispatch.Deps{
		Now: deps.Now, Logger: g.log, Observer: g.metrics, Seed: replicaSeed(cfg.Seed, cfg.GatewayID), CollectGrace: cfg.TargetCollectGrace,
		MaxEjectionPercent: cfg.OutlierMaxEjectionPercent, ClusterBackends: cfg.ClusterBackends,
	})
	outlier, onEjected := g.setUpHealth()
	g.fleet = fleet.New(fleet.Deps{
		Now: deps.Now, Logger: g.log, System: g.sys, Schedulers: g.dir,
		NewClient: g.newClient, Probe: g.probe, ProbeInterval: cfg.HealthProbeInterval,
		DefaultHeartbeat: cfg.Heartbeat, MinExpiry: cfg.MinExpiry,
		OnExpired: func(string) { g.metrics.inc(mBackendsExpired) },
		Outlier:   outlier, OnEjected: onEjected, OnUnresponsive: g.abandon,
	})
	g.server = &fasthttp.Server{
		Handler:               g.handle,
		Name:                  "switchyard-gateway",
		MaxRequestBodySize:    cfg.MaxReplayBodyBytes,
		ReadBufferSize:        clientReadBuffer,
		WriteBufferSize:       clientWriteBuffer,
		NoDefaultServerHeader: true,
		ErrorHandler:          g.serverError,
		ConnState:             g.connState,
		CloseOnShutdown:       true,
		Logger:                slogPrinter{g.log},
	}
	g.handoff = handoff.New(g.server, func(c net.Conn) { g.connState(c, fasthttp.StateIdle) }) // a stream's deferred work
	g.metrics.set.NewGauge(g.metrics.prefix+mStreamsRelayed, func() float64 { return float64(g.handoff.Streams()) })
	g.admin = &fasthttp.Server{
		Handler:               g.handleAdmin,
		Name:                  "switchyard-gateway-admin",
		MaxRequestBodySize:    cfg.MaxAdminBodyBytes,
		NoDefaultServerHeader: true,
		ErrorHandler:          g.serverError,
		CloseOnShutdown:       true,
		Logger:                slogPrinter{g.log},
	}
	// Header, body and idle timeouts and the connection cap on both listeners; request
	// bodies are read against the limits above as they arrive. No write timeout: a stream
	// (or a CPU profile on the admin listener) may take as long as it needs.
	httpserver.Apply(g.server, cfg.ServerLimits, g.serverTLS != nil)
	httpserver.Apply(g.admin, cfg.ServerLimits, g.adminTLS != nil)
	var sweepCtx context.Context
	sweepCtx, g.stopSweep = context.WithCancel(context.Background())
	g.sweepDone = make(chan struct{})
	go func() {
		defer close(g.sweepDone)
		if cfg.SeriesRetention > 0 {
			g.sweepSeries(sweepCtx)
		}
	}()
	return g, nil
}

// setUpSecurity loads the control token and the TLS configurations (failing fast on
// unreadable files).
func (g *Gateway) setUpSecurity() error {
	cfg := &g.cfg
	tok, err := secret.NewToken(cfg.ControlToken, cfg.ControlTokenFile, g.log)
	if err != nil {
		return err
	}
	g.token = tok
	if g.workers, err = secret.NewWorkers(cfg.WorkerCredentialsFile, g.log); err != nil {
		return err //nolint:wrapcheck // names the flag and the file
	}
	if !tok.Configured() {
		if IsLoopback(cfg.AdminListenAddr) {
			g.log.Info("admin_listener_without_token", "addr", cfg.AdminListenAddr, "detail", "development mode: any local process can register backends")
		} else {
			g.log.Warn("admin_listener_insecure", "addr", cfg.AdminListenAddr, "detail", "--insecure-no-control-auth: anyone who reaches this address can register backends")
		}
	}
	if g.serverTLS, err = tlsx.ServerConfig(cfg.TLS, g.log); err != nil {
		return err
	}
	g.adminTLS = g.serverTLS
	if cfg.AdminClientCAFile != "" {
		if g.serverTLS == nil {
			return errors.New("--admin-tls-client-ca-file needs --tls-cert-file and --tls-key-file")
		}
		o := cfg.TLS
		o.ClientCAFile = cfg.AdminClientCAFile
		if g.adminTLS, err = tlsx.ServerConfig(o, g.log); err != nil {
			return err
		}
	}
	g.upstreamTLS, err = tlsx.ClientConfig(cfg.UpstreamTLS, g.log)
	return err
}

type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Printf(format string, args ...any) {
	p.l.Debug("fasthttp", "detail", fmt.Sprintf(format, args...))
}

// Config returns the effective configuration.
func (g *Gateway) Config() Config { return g.cfg }

// newClient builds the keep-alive pool of one backend.
func (g *Gateway) newClient(u *url.URL) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                          u.Host,
		IsTLS:                         u.Scheme == "https",
		TLSConfig:                     g.upstreamTLS,
		Name:                          "switchyard-gateway",
		NoDefaultUserAgentHeader:      true,
		MaxConns:                      relay.UpstreamConnCap(g.cfg.ServerLimits.WithDefaults().MaxConnections),
		MaxConnWaitTimeout:            5 * time.Second,
		MaxIdleConnDuration:           30 * time.Second,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true,
		ReadBufferSize:                upstreamReadBuffer,
		WriteBufferSize:               upstreamWriteBuffer,
		MaxResponseBodySize:           maxBufferedResponse, // streamed bodies are not limited
		ConnPoolStrategy:              fasthttp.LIFO,
		DialTimeout:                   g.upstream.DialTimeout,
	}
}

// Serve serves the public listener on ln until Shutdown (over TLS when configured).
func (g *Gateway) Serve(ln net.Listener) error {
	if !g.listeners.add(ln) {
		return nil
	}
	return g.server.Serve(clientListener{Listener: ln, tls: g.serverTLS, raw: !g.cfg.NoRawSocketIO, writeStall: g.cfg.ServerLimits.WriteStall()})
}

// ServeAdmin serves the admin listener on ln until Shutdown (over TLS when configured).
func (g *Gateway) ServeAdmin(ln net.Listener) error {
	if !g.listeners.add(ln) {
		return nil
	}
	return g.admin.Serve(g.adminListener(ln))
}

// adminListener is ln as the admin server serves it: with raw socket I/O (unless
// --raw-socket-io=false: every pylon's heartbeat is a read and a write after an idle
// spell), inside TLS when configured.
func (g *Gateway) adminListener(ln net.Listener) net.Listener {
	ln = relay.Listener(ln, !g.cfg.NoRawSocketIO, g.cfg.ServerLimits.WriteStall())
	if g.adminTLS != nil {
		ln = tls.NewListener(ln, g.adminTLS)
	}
	return ln
}

// Run listens on the configured address and serves until ctx is done, then shuts down
// gracefully: /readyz turns 503, in-flight requests and streams drain up to DrainTimeout.
func (g *Gateway) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.cfg.ListenAddr, err)
	}
	aln, err := net.Listen("tcp", g.cfg.AdminListenAddr)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("listen %s (--admin-listen-addr): %w", g.cfg.AdminListenAddr, err)
	}
	g.log.Info("gateway_listening", "addr", ln.Addr().String(), "admin_addr", aln.Addr().String(),
		"tls", g.serverTLS != nil, "control_auth", g.token.Configured(), "gateway_id", g.cfg.GatewayID)
	if err := relay.DetachSupported(); err != nil {
		g.log.Warn("streams_unguarded", "err", err, "detail", "relayed event streams are handed over as they are: a pylon failing mid-stream cuts the client's connection")
	}
	errc := make(chan error, 2)
	go func() { errc <- g.Serve(ln) }()
	go func() { errc <- g.ServeAdmin(aln) }()
	reloadCtx, stopReload := context.WithCancel(ctx)
	defer stopReload()
	if g.cfg.LBConfigPath != "" {
		go g.watchLBConfig(reloadCtx)
	}
	select {
	case err := <-errc:
		_ = g.server.Shutdown()
		_ = g.admin.Shutdown()
		g.listeners.close()
		err = errors.Join(err, <-errc)
		g.Close()
		return err
	case <-ctx.Done():
	}
	g.Shutdown()
	return errors.Join(<-errc, <-errc)
}

// Shutdown drains: readiness off, stop accepting, wait for in-flight requests up to
// DrainTimeout, then stop the actors.
func (g *Gateway) Shutdown() {
	g.draining.Store(true)
	if g.cfg.ShutdownDelay > 0 {
		time.Sleep(g.cfg.ShutdownDelay)
	}
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg.DrainTimeout)
	defer cancel()
	g.handoff.Close()
	_ = g.server.ShutdownWithContext(sctx)
	_ = g.admin.ShutdownWithContext(sctx)
	_ = g.handoff.Wait(sctx) // streams handed off the server; past the drain timeout, cut with the process
	g.listeners.close()
	g.Close()
}

// Close stops the actors and probers (after the server stopped).
func (g *Gateway) Close() {
	g.fleet.Stop()
	g.dir.Stop()
	g.sys.Shutdown()
	close(g.stopWatch)
	<-g.watchDone
	g.stopSweep()
	<-g.sweepDone
}

// listenerSet closes the listeners handed to Serve and ServeAdmin at shutdown, so a Serve
// that started after the servers' shutdown (which only closes the listeners it has seen)
// still returns, and refuses listeners handed over once it has closed.
type listenerSet struct {
	mu     sync.Mutex
	closed bool
	lns    []net.Listener
}

func (s *listenerSet) add(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = ln.Close()
		return false
	}
	s.lns = append(s.lns, ln)
	return true
}

func (s *listenerSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, ln := range s.lns {
		_ = ln.Close()
	}
}

// Reload re-reads the lb-config file; an invalid file keeps the current configuration.
func (g *Gateway) Reload() error {
	if g.cfg.LBConfigPath == "" {
		return nil
	}
	c, err := loadLBConfig(g.cfg.LBConfigPath)
	if err != nil {
		g.metrics.inc(mLBConfigReloads, "result", "rejected")
		g.log.Error("lb_config_reload_rejected", "path", g.cfg.LBConfigPath, "err", err, "detail", "keeping the current config")
		return err
	}
	g.lbcfg.Store(c)
	g.dir.ResetBalancers(c)
	g.metrics.inc(mLBConfigReloads, "result", "applied")
	g.log.Info("lb_config_reloaded", "path", g.cfg.LBConfigPath)
	return nil
}

func (g *Gateway) watchLBConfig(ctx context.Context) {
	actors.Every(ctx, g.cfg.ReloadPoll, func() {
		st, err := os.Stat(g.cfg.LBConfigPath)
		if err != nil || st.ModTime().Equal(g.lbMtime) {
			return
		}
		g.lbMtime = st.ModTime()
		_ = g.Reload()
	})
}

// newRequestID generates an x-request-id for clients that send none.
func (g *Gateway) newRequestID() string {
	return g.idPrefix + strconv.FormatUint(g.idSeq.Add(1), 10)
}

// replicaSeed is the seed of this replica's balancers: --seed mixed with the replica's
// gateway id. Replicas started with the same --seed (by default all of them: 0) would
// otherwise draw the same random sequence, and with clients spread evenly over them
// they would sample the same candidates at about the same moments (power-of-n) and break
// ties alike, herding onto the same backends. One replica with a fixed id and seed still
// draws the same sequence on every start.
func replicaSeed(seed uint64, gatewayID string) uint64 {
	return seed ^ xxh3.HashString(gatewayID)
}

package mock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/internal/echo"
	"github.com/switchyard/switchyard/internal/promtext"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/engines/kvcache"
	"github.com/switchyard/switchyard/engines/latency"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/tlsx"
)

// Deps are the engine's injected dependencies. Zero fields get defaults.
type Deps struct {
	// Now returns the current time (default time.Now). Waits use runtime timers, which
	// testing/synctest virtualises together with time.Now.
	Now func() time.Time
	// Logger receives the engine's logs (default: discarded).
	Logger *slog.Logger
	// Tracer, when not nil, gets one span per generation, a child of the request's
	// traceparent (tracing.go).
	Tracer trace.Tracer
}

// modelState is one served model: its metrics and fault controls.
type modelState struct {
	name    string
	metrics *modelMetrics
	// guarded by Engine.mu
	control  Control
	changed  chan struct{} // closed and replaced when control changes
	requests uint64        // requests seen, for fail_fraction
}

type counterKey struct {
	endpoint string
	model    string
	class    string
}

// Engine is one mock inference engine. Create it with New, serve with Serve or Run, stop
// with Close.
type Engine struct {
	cfg     Config
	tracer  trace.Tracer // nil: tracing off
	tls     *tls.Config  // nil = plain HTTP
	now     func() time.Time
	log     *slog.Logger
	legacy  latency.Legacy
	done    chan struct{}
	closing sync.Once
	server  *fasthttp.Server
	sem     chan struct{} // nil when unlimited
	ids     atomic.Uint64
	metrics *metrics.Set
	names   *metricNames // the name set of /metrics
	hub     hub

	legacyRunning, semWaiting atomic.Int64
	// liveKV is the KV working set of the admitted requests (input + output tokens each):
	// what the engine's KV cache cannot evict now. Cached prefixes of finished requests are
	// evictable, so they are not "used" in /kv-cache/stats and the usage gauges (as a real
	// engine's prefix cache: its free blocks include the cached, unreferenced ones).
	liveKV atomic.Int64

	mu                sync.Mutex
	caches            []*kvcache.Cache // one per worker (one in the legacy model)
	sim               *latency.Batched // nil in the legacy model
	gens              map[uint64]*gen  // batched sequences by ID
	events            []latency.Event  // scratch for Advance
	models            map[string]*modelState
	discovery         []string
	discoveryRequests uint64
	healthDelay       time.Duration // -1: use cfg.HealthDelay
	counters          map[counterKey]uint64

	kick       chan struct{}
	driverDone chan struct{}
}

// New validates cfg and returns an engine that is not yet serving.
func New(cfg Config, deps Deps) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg:         cfg,
		tracer:      deps.Tracer,
		now:         deps.Now,
		log:         deps.Logger.With("component", "engine"),
		legacy:      cfg.legacy(),
		done:        make(chan struct{}),
		metrics:     metrics.NewSet(),
		names:       namesOf(cfg.MetricsNames),
		gens:        make(map[uint64]*gen),
		models:      make(map[string]*modelState),
		discovery:   append([]string(nil), cfg.ModelNames...),
		healthDelay: -1,
		counters:    make(map[counterKey]uint64),
		kick:        make(chan struct{}, 1),
	}
	e.ids.Store(cfg.Seed << 32)
	if cfg.MaxConcurrentRequests > 0 {
		e.sem = make(chan struct{}, cfg.MaxConcurrentRequests)
	}
	workers := 1
	if cfg.EngineModel == ModelBatched {
		e.sim = latency.NewBatched(cfg.Batched)
		workers = e.sim.Config().Workers
	}
	for range workers {
		e.caches = append(e.caches, kvcache.New(cfg.KVCacheCapacityTokens))
	}
	for _, m := range cfg.ModelNames {
		e.models[m] = e.newModelState(m)
	}
	e.registerEngineGauges(cfg.ModelNames[0])
	tlsCfg, err := tlsx.ServerConfig(cfg.TLS, e.log)
	if err != nil {
		return nil, err
	}
	e.tls = tlsCfg
	e.server = &fasthttp.Server{
		Handler:      e.Handler,
		ErrorHandler: e.errorHandler,
		Name:         "switchyard-engine",
		// Bodies up to the hard cap are read so that the handler can answer 413 with a JSON
		// body on a connection that stays usable; beyond it fasthttp's ErrorHandler answers.
		MaxRequestBodySize:    max(2*cfg.MaxRequestBodyBytes, cfg.MaxRequestBodyBytes+1<<20),
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		ReadBufferSize:        cfg.ReadBufferBytes,
		WriteBufferSize:       cfg.WriteBufferBytes,
		// Return the read buffer to a pool once a request is read, and the write buffer
		// once a response is written: an open stream then holds only its write buffer.
		ReduceMemoryUsage: true,
		Logger:            fasthttpLogger{e.log},
	}
	// Header, body and idle timeouts and the connection cap; request bodies are read
	// against the hard cap as they arrive. No write timeout: a stream may be long.
	httpserver.Apply(e.server, cfg.ServerLimits, e.tls != nil)
	if e.sim != nil {
		e.driverDone = make(chan struct{})
		go e.drive()
	}
	return e, nil
}

func (e *Engine) newModelState(name string) *modelState {
	return &modelState{name: name, metrics: newModelMetrics(e.metrics, e.names, name), changed: make(chan struct{})}
}

// MaxConcurrency returns the concurrency the engine advertises in stats pings: workers ×
// max_num_seqs in the batched model, --max-concurrent-requests in the legacy model, or 0
// when unbounded. With both set, the smaller.
func (e *Engine) MaxConcurrency() int {
	n := e.cfg.MaxConcurrentRequests
	if e.sim != nil {
		if b := e.sim.MaxConcurrency(); n == 0 || b < n {
			n = b
		}
	}
	return n
}

// Serve serves HTTP on ln until Close (HTTPS when Config.TLS has a certificate).
func (e *Engine) Serve(ln net.Listener) error {
	e.log.Info("engine_serving", "addr", ln.Addr().String(), "engine_model", e.cfg.EngineModel, "models", e.cfg.ModelNames, "tls", e.tls != nil)
	ln = relay.Listener(ln, false, e.cfg.ServerLimits.WriteStall()) // a pylon that stops reading (--write-timeout)
	if e.tls != nil {
		ln = tls.NewListener(ln, e.tls)
	}
	return e.server.Serve(ln)
}

// Run listens on the configured address and serves until ctx is done, then closes.
func (e *Engine) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", e.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", e.cfg.ListenAddr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- e.Serve(ln) }()
	select {
	case <-ctx.Done():
		closeErr := e.Close()
		// The server's Shutdown closes only the listeners Serve has registered: a signal
		// that arrives before Serve got that far would leave it serving for ever.
		_ = ln.Close()
		err := <-errc
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		return errors.Join(closeErr, err)
	case err := <-errc:
		return errors.Join(err, e.Close())
	}
}

// Close ends open streams and hanging requests, shuts the server down and stops the
// batching driver. It is idempotent.
func (e *Engine) Close() error {
	var err error
	e.closing.Do(func() {
		close(e.done)
		err = e.server.Shutdown()
		if e.driverDone != nil {
			<-e.driverDone
		}
	})
	return err
}

type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug("fasthttp", "detail", fmt.Sprintf(format, args...))
}

// errorHandler answers requests fasthttp could not read. fasthttp's errors quote pieces
// of the request: the answer names the error class only, the detail goes to the debug log.
func (e *Engine) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	e.log.Debug("unreadable_request", "remote_addr", ctx.RemoteAddr().String(), "err", err)
	writeError(ctx, fmt.Errorf("%w: %w", errBadHTTP, err))
}

// Handler is the engine's fasthttp handler.
func (e *Engine) Handler(ctx *fasthttp.RequestCtx) {
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("handler_panic", "panic", fmt.Sprint(r), "path", string(ctx.Path()))
			writeError(ctx, errors.New("panic"))
		}
	}()
	path := ctx.Path()
	switch string(path) {
	case "/v1/chat/completions":
		e.post(ctx, epChat)
	case "/v1/completions":
		e.post(ctx, epCompletions)
	case "/v1/responses":
		e.post(ctx, epResponses)
	case "/v1/embeddings":
		e.post(ctx, epEmbeddings)
	case "/v1/models":
		e.get(ctx, e.serveModels)
	case "/health":
		e.get(ctx, e.serveHealth)
	case "/pylon/v1/stats/stream":
		e.get(ctx, e.serveStatsStream)
	case "/kv-cache/stats":
		e.get(ctx, e.serveKVStats)
	case "/metrics":
		e.get(ctx, e.serveMetrics)
	default:
		if e.cfg.EnableTestControl && e.routeTestControl(ctx, path) {
			return
		}
		writeError(ctx, &apiError{Status: fasthttp.StatusNotFound, Type: typeNotFound, Code: "not_found", Message: "no route for " + echo.Quote(path)})
	}
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, &apiError{Status: fasthttp.StatusMethodNotAllowed, Type: typeInvalidRequest, Code: "method_not_allowed", Message: "method not allowed; use " + allow})
}

func (e *Engine) get(ctx *fasthttp.RequestCtx, h fasthttp.RequestHandler) {
	if !ctx.IsGet() && !ctx.IsHead() {
		methodNotAllowed(ctx, fasthttp.MethodGet)
		return
	}
	h(ctx)
}

func (e *Engine) put(ctx *fasthttp.RequestCtx, h fasthttp.RequestHandler) {
	if !ctx.IsPut() {
		methodNotAllowed(ctx, fasthttp.MethodPut)
		return
	}
	h(ctx)
}

func (e *Engine) post(ctx *fasthttp.RequestCtx, ep endpoint) {
	if !ctx.IsPost() {
		methodNotAllowed(ctx, fasthttp.MethodPost)
		return
	}
	if len(ctx.PostBody()) > e.cfg.MaxRequestBodyBytes {
		writeError(ctx, fasthttp.ErrBodyTooLarge)
		return
	}
	if err := e.generate(ctx, ep); err != nil {
		writeError(ctx, err)
	}
}

// sleep waits d or until the engine closes.
func (e *Engine) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-e.done:
		return errEngineClosed
	}
}

func (e *Engine) serveHealth(ctx *fasthttp.RequestCtx) {
	e.mu.Lock()
	d := e.healthDelay
	e.mu.Unlock()
	if d < 0 {
		d = e.cfg.HealthDelay
	}
	if err := e.sleep(latency.Scale(d, e.cfg.TimeScale)); err != nil {
		writeError(ctx, err)
		return
	}
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString("ok")
}

func (e *Engine) serveModels(ctx *fasthttp.RequestCtx) {
	e.mu.Lock()
	e.discoveryRequests++
	names := append([]string(nil), e.discovery...)
	e.mu.Unlock()
	b := []byte(`{"object":"list","data":[`)
	for i, m := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, m)
		b = append(b, `,"object":"model","created":0,"owned_by":"switchyard","max_model_len":null}`...)
	}
	b = append(b, "]}"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (e *Engine) serveMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType(promtext.ContentType)
	e.names.page.Write(ctx, e.metrics.WritePrometheus)
}

// load returns running and waiting requests as vLLM reports them.
func (e *Engine) load() (running, waiting int) {
	waiting = int(e.semWaiting.Load())
	if e.sim == nil {
		return int(e.legacyRunning.Load()), waiting
	}
	e.mu.Lock()
	r, w := e.sim.Load()
	e.mu.Unlock()
	return r, waiting + w
}

// kvStats is the engine's KV figures: the prefix caches' counters, with used = the KV the
// running requests hold (liveKV, at most the capacity) and free = capacity − used. The
// caches' own contents are evictable, hence free to a new request.
func (e *Engine) kvStats() kvcache.Stats {
	e.mu.Lock()
	var st kvcache.Stats
	for _, c := range e.caches {
		st = st.Add(c.Stats())
	}
	e.mu.Unlock()
	st.UsedTokens = min(uint64(max(e.liveKV.Load(), 0)), st.CapacityTokens)
	st.FreeTokens = st.CapacityTokens - st.UsedTokens
	return st
}

type kvStatsBody struct {
	Model string `json:"model"`
	kvcache.Stats
}

func (e *Engine) serveKVStats(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, kvStatsBody{Model: e.cfg.ModelNames[0], Stats: e.kvStats()})
}

// requestID returns the x-request-id header or a generated ID.
func (e *Engine) requestID(h *fasthttp.RequestHeader) string {
	if v := h.Peek(headerRequestID); len(v) > 0 {
		return string(v)
	}
	return "req-" + strconv.FormatUint(e.ids.Add(1), 36)
}

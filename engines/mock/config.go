package mock

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/switchyard/switchyard/engines/latency"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/tlsx"
)

// Defaults of the engine's flags.
const (
	DefaultListenAddr          = "127.0.0.1:8090"
	DefaultModelName           = "dummy-model"
	DefaultNumTokens           = 10
	DefaultTokenDelay          = 100 * time.Millisecond
	DefaultMaxRequestBodyBytes = 16 << 20
	DefaultEmbeddingDimensions = 64
	// DefaultReadBufferBytes is the per-connection read buffer. It caps a request's
	// header size (fasthttp's default, enough for long bearer tokens); prompts travel in
	// the body, which has its own limit.
	DefaultReadBufferBytes = 4096
	// DefaultWriteBufferBytes is the per-connection write buffer. Every SSE event is
	// flushed on its own and fits in it; a non-streamed body larger than the rest of the
	// buffer costs one more write call.
	DefaultWriteBufferBytes = 1024
	// MinBufferBytes is the smallest accepted read or write buffer.
	MinBufferBytes = 256
	// PingInterval is the stats stream's ping period.
	PingInterval = time.Second
)

// Engine models.
const (
	ModelLegacy  = "legacy"
	ModelBatched = "batched"
)

// Config configures one mock engine. Durations and counts follow the engine's CLI flags;
// the comment on each field gives its default. Zero means the default only where noted.
type Config struct {
	// ListenAddr is the TCP listen address used by Run (default 127.0.0.1:8090).
	ListenAddr string
	// ModelNames are the served models; the first is the default (default ["dummy-model"]).
	ModelNames []string
	// NumTokens is the default number of output tokens (zero means 10).
	NumTokens int
	// TokenDelay is the delay before each token after the first (legacy; default 0 here,
	// 100 ms from the CLI).
	TokenDelay time.Duration
	// DecodeJitter bounds the deterministic per-token jitter (legacy; default 0).
	DecodeJitter time.Duration
	// TTFT is the fixed delay between prefill and the first token (legacy; default 0).
	TTFT time.Duration
	// TTFTJitter bounds the deterministic TTFT jitter (legacy; default 0).
	TTFTJitter time.Duration
	// PrefillTokensPerSecond is the legacy prefill rate; 0 means no prefill delay.
	PrefillTokensPerSecond float64
	// MaxConcurrentRequests bounds the requests generating at once; 0 means unlimited.
	MaxConcurrentRequests int
	// HideConcurrency leaves max_engine_concurrency out of the stats stream's pings, as
	// engines that do not report their concurrency: the pylons then publish it unknown
	// (--no-advertise-concurrency).
	HideConcurrency bool
	// HealthDelay delays GET /health (default 0).
	HealthDelay time.Duration
	// KVCacheCapacityTokens is the prefix cache capacity (per worker in the batched
	// model); 0 disables the cache.
	KVCacheCapacityTokens uint64
	// EngineModel is "legacy" (default) or "batched".
	EngineModel string
	// Batched configures the batched model (zero fields mean the reference profile).
	Batched latency.BatchedConfig
	// Seed is mixed into jitter, generated request IDs and embedding vectors; 0 reproduces
	// the reference mock's jitter.
	Seed uint64
	// TimeScale multiplies every delay (zero means 1).
	TimeScale float64
	// MaxRequestBodyBytes bounds request bodies; larger bodies get 413 (zero means 16 MiB).
	MaxRequestBodyBytes int
	// ReadBufferBytes is the per-connection read buffer; a request whose headers do not
	// fit gets 431 (zero means 4096). The server runs with fasthttp's ReduceMemoryUsage,
	// so the buffer is returned to a pool once a request is read: an open stream does
	// not hold it.
	ReadBufferBytes int
	// WriteBufferBytes is the per-connection write buffer, held while a response is
	// written, for the whole life of a stream (zero means 1024).
	WriteBufferBytes int
	// MetricsNames is the name set of GET /metrics: MetricsNamesNative (default), the
	// engine's own switchyard_engine_ names, or MetricsNamesVLLM, vLLM's vllm: names for
	// scrapers written for vLLM (the pylon's --engine-metrics vllm).
	MetricsNames string
	// EnableTestControl serves the fault-injection endpoints under /test-control (default
	// off: they answer 404 like any unknown path). They let whoever reaches the engine
	// inject failures, hangs and delays, so they are for tests and benchmarks only.
	EnableTestControl bool
	// TLS serves HTTPS when its certificate is set (the pair re-read when it changes).
	TLS tlsx.ServerOptions
	// ServerLimits are the listener's connection limits: header, body and idle timeouts,
	// the connection cap and the memory large request bodies may hold (zero fields: the
	// defaults of package httpserver).
	ServerLimits httpserver.Limits
}

// ErrConfig is the class of configuration errors.
var ErrConfig = errors.New("invalid engine config")

// WithDefaults returns c with zero fields that have defaults filled in.
func (c Config) WithDefaults() Config {
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	if len(c.ModelNames) == 0 {
		c.ModelNames = []string{DefaultModelName}
	}
	if c.NumTokens == 0 {
		c.NumTokens = DefaultNumTokens
	}
	if c.EngineModel == "" {
		c.EngineModel = ModelLegacy
	}
	if c.TimeScale == 0 {
		c.TimeScale = 1
	}
	if c.MetricsNames == "" {
		c.MetricsNames = MetricsNamesNative
	}
	if c.MaxRequestBodyBytes == 0 {
		c.MaxRequestBodyBytes = DefaultMaxRequestBodyBytes
	}
	if c.ReadBufferBytes == 0 {
		c.ReadBufferBytes = DefaultReadBufferBytes
	}
	if c.WriteBufferBytes == 0 {
		c.WriteBufferBytes = DefaultWriteBufferBytes
	}
	c.Batched.TimeScale = c.TimeScale
	return c
}

// Validate returns one precise error per bad field, joined.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	seen := map[string]bool{}
	for _, m := range c.ModelNames {
		switch {
		case m == "":
			bad("model name must not be empty")
		case seen[m]:
			bad("model name %q repeated", m)
		}
		seen[m] = true
	}
	if c.NumTokens < 0 {
		bad("num-tokens is %d, want ≥ 0", c.NumTokens)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"token-delay", c.TokenDelay},
		{"decode-jitter", c.DecodeJitter},
		{"ttft", c.TTFT},
		{"ttft-jitter", c.TTFTJitter},
		{"health-delay", c.HealthDelay},
	} {
		if f.d < 0 {
			bad("%s is %v, want ≥ 0", f.name, f.d)
		}
	}
	if c.PrefillTokensPerSecond < 0 || math.IsNaN(c.PrefillTokensPerSecond) || math.IsInf(c.PrefillTokensPerSecond, 0) {
		bad("prefill-tokens-per-s is %v, want a finite value ≥ 0", c.PrefillTokensPerSecond)
	}
	if c.MaxConcurrentRequests < 0 {
		bad("max-concurrent-requests is %d, want ≥ 0", c.MaxConcurrentRequests)
	}
	switch c.EngineModel {
	case "", ModelLegacy, ModelBatched:
	default:
		bad("engine-model is %q, want legacy or batched", c.EngineModel)
	}
	switch c.MetricsNames {
	case "", MetricsNamesNative, MetricsNamesVLLM:
	default:
		bad("metrics-names is %q, want native or vllm", c.MetricsNames)
	}
	if c.TimeScale < 0 || math.IsNaN(c.TimeScale) || math.IsInf(c.TimeScale, 0) {
		bad("time-scale is %v, want a finite value ≥ 0", c.TimeScale)
	}
	if c.MaxRequestBodyBytes < 0 {
		bad("max-request-body-bytes is %d, want ≥ 0", c.MaxRequestBodyBytes)
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"read-buffer-bytes", c.ReadBufferBytes}, {"write-buffer-bytes", c.WriteBufferBytes}} {
		if f.n != 0 && f.n < MinBufferBytes {
			bad("%s is %d, want 0 (default) or ≥ %d", f.name, f.n, MinBufferBytes)
		}
	}
	if err := c.ServerLimits.Validate(); err != nil {
		bad("%v", err)
	}
	if err := c.Batched.Validate(); err != nil {
		// One line per bad batched field, each marked as a config error.
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				errs = append(errs, fmt.Errorf("%w: %w", ErrConfig, e))
			}
		} else {
			errs = append(errs, fmt.Errorf("%w: %w", ErrConfig, err))
		}
	}
	return errors.Join(errs...)
}

func (c Config) legacy() latency.Legacy {
	return latency.Legacy{
		TTFT: c.TTFT, TTFTJitter: c.TTFTJitter, TokenDelay: c.TokenDelay, DecodeJitter: c.DecodeJitter,
		PrefillTokensPerSecond: c.PrefillTokensPerSecond, TimeScale: c.TimeScale, Seed: c.Seed,
	}
}

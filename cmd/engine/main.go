// Command engine is the Switchyard mock inference engine: an OpenAI-compatible server with
// a seeded timing model (legacy or continuous batching), a prefix KV cache, an NDJSON
// stats stream, Prometheus metrics (its own names, or vLLM's with --metrics-names=vllm) and
// fault injection.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/engines/latency"
	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/cmdline"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/internal/tracing"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type cli struct {
	// --version, --config, --log-format, --log-level.
	Common cmdline.Flags `embed:""`

	HTTPListenAddr        string        `name:"http-listen-addr" default:"127.0.0.1:8090" help:"Listen address."`
	ModelName             []string      `name:"model-name" default:"dummy-model" sep:"," help:"Served model name (repeatable; the first is the default)."`
	NumTokens             int           `name:"num-tokens" default:"10" help:"Default number of output tokens."`
	TokenDelay            time.Duration `name:"token-delay" default:"100ms" help:"Delay before each token after the first (legacy)."`
	DecodeJitter          time.Duration `name:"decode-jitter" default:"0s" help:"Bound of the deterministic per-token jitter (legacy)."`
	TTFT                  time.Duration `name:"ttft" default:"0s" help:"Fixed delay before the first token (legacy)."`
	TTFTJitter            time.Duration `name:"ttft-jitter" default:"0s" help:"Bound of the deterministic TTFT jitter (legacy)."`
	PrefillTokensPerS     float64       `name:"prefill-tokens-per-s" default:"0" help:"Prefill rate in tokens/s (legacy); 0 = no prefill delay."`
	MaxConcurrentRequests int           `name:"max-concurrent-requests" default:"0" help:"Requests generating at once; 0 = unlimited."`
	AdvertiseConcurrency  bool          `name:"advertise-concurrency" default:"true" negatable:"" help:"Report the concurrency limit (max_engine_concurrency) in the stats stream's pings; --no-advertise-concurrency behaves as an engine that does not, so pylons publish it unknown and gateways estimate queueing from prompt work alone."`
	HealthDelay           time.Duration `name:"health-delay" default:"0s" help:"Delay of GET /health."`
	KVCacheCapacityTokens uint64        `name:"kv-cache-capacity-tokens" default:"0" help:"Prefix KV cache capacity in tokens (per worker); 0 = no cache."`
	EngineModel           string        `name:"engine-model" default:"legacy" enum:"legacy,batched" help:"Timing model: legacy or batched."`
	Seed                  uint64        `name:"seed" default:"0" help:"Seed mixed into jitter, generated IDs and embeddings (0 = reference jitter)."`
	TimeScale             float64       `name:"time-scale" default:"1.0" help:"Multiplies every delay."`
	NumGPUWorkers         int           `name:"num-gpu-workers" default:"1" help:"Workers in the batched model."`
	MaxNumSeqs            int           `name:"max-num-seqs" default:"25" help:"Running sequences per worker (batched)."`
	MaxBatchedTokens      int           `name:"max-batched-tokens" default:"2048" help:"Token budget per step (batched)."`
	StepFixed             time.Duration `name:"step-fixed" default:"4ms" help:"Fixed step time (batched)."`
	StepDecodePerSeq      time.Duration `name:"step-decode-per-seq" default:"85us" help:"Step time per decoding sequence (batched)."`
	StepPrefillPerToken   time.Duration `name:"step-prefill-per-token" default:"50us" help:"Step time per prefill token (batched)."`
	MaxRequestBodyBytes   int           `name:"max-request-body-bytes" default:"16777216" help:"Largest accepted request body; larger gets 413."`
	ReadBufferBytes       int           `name:"read-buffer-bytes" default:"4096" help:"Per-connection read buffer; caps request header size (larger headers get 431). Released while a stream is open."`
	WriteBufferBytes      int           `name:"write-buffer-bytes" default:"1024" help:"Per-connection write buffer, held for the life of a stream."`
	TLSCertFile           string        `name:"tls-cert-file" type:"path" help:"PEM certificate: serve HTTPS (re-read when it changes)."`
	TLSKeyFile            string        `name:"tls-key-file" type:"path" help:"PEM private key of --tls-cert-file."`
	MetricsNames          string        `name:"metrics-names" default:"native" enum:"native,vllm" help:"Metric names of GET /metrics: native (switchyard_engine_*, in base units, promtool-clean) or vllm (vLLM's vllm:* names and model_name label, for scrapers written for vLLM such as a pylon with --engine-metrics=vllm; promtool reports their ':')."`
	EnableTestControl     bool          `name:"enable-test-control" help:"Serve the fault-injection endpoints under /test-control (tests and benchmarks only: anyone who reaches the engine can then inject failures, hangs and delays). Off: they answer 404."`
	// The listener's connection limits.
	Limits httpserver.Flags `embed:""`
	// --otlp-endpoint and --trace-sample (docs/tracing.md).
	Tracing tracing.Flags `embed:""`

	// The millisecond forms of the durations above, from before they took Go durations
	// (the bench and older scripts pass them); hidden, applied by cmdline.ApplyMillis.
	TokenDelayMs          float64 `name:"token-delay-ms" hidden:"" millis-of:"token-delay" help:"--token-delay in milliseconds."`
	DecodeJitterMs        float64 `name:"decode-jitter-ms" hidden:"" millis-of:"decode-jitter" help:"--decode-jitter in milliseconds."`
	TTFTMs                float64 `name:"ttft-ms" hidden:"" millis-of:"ttft" help:"--ttft in milliseconds."`
	TTFTJitterMs          float64 `name:"ttft-jitter-ms" hidden:"" millis-of:"ttft-jitter" help:"--ttft-jitter in milliseconds."`
	HealthDelayMs         float64 `name:"health-delay-ms" hidden:"" millis-of:"health-delay" help:"--health-delay in milliseconds."`
	StepFixedMs           float64 `name:"step-fixed-ms" hidden:"" millis-of:"step-fixed" help:"--step-fixed in milliseconds."`
	StepDecodeMsPerSeq    float64 `name:"step-decode-ms-per-seq" hidden:"" millis-of:"step-decode-per-seq" help:"--step-decode-per-seq in milliseconds."`
	StepPrefillMsPerToken float64 `name:"step-prefill-ms-per-token" hidden:"" millis-of:"step-prefill-per-token" help:"--step-prefill-per-token in milliseconds."`
}

func (c *cli) config() mock.Config {
	return mock.Config{
		ListenAddr:             c.HTTPListenAddr,
		ModelNames:             c.ModelName,
		NumTokens:              c.NumTokens,
		TokenDelay:             c.TokenDelay,
		DecodeJitter:           c.DecodeJitter,
		TTFT:                   c.TTFT,
		TTFTJitter:             c.TTFTJitter,
		PrefillTokensPerSecond: c.PrefillTokensPerS,
		MaxConcurrentRequests:  c.MaxConcurrentRequests,
		HideConcurrency:        !c.AdvertiseConcurrency,
		HealthDelay:            c.HealthDelay,
		KVCacheCapacityTokens:  c.KVCacheCapacityTokens,
		EngineModel:            c.EngineModel,
		Seed:                   c.Seed,
		TimeScale:              c.TimeScale,
		MaxRequestBodyBytes:    c.MaxRequestBodyBytes,
		ReadBufferBytes:        c.ReadBufferBytes,
		WriteBufferBytes:       c.WriteBufferBytes,
		TLS:                    tlsx.ServerOptions{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile},
		EnableTestControl:      c.EnableTestControl,
		MetricsNames:           c.MetricsNames,
		ServerLimits:           c.Limits.Limits(),
		Batched: latency.BatchedConfig{
			Workers:             c.NumGPUWorkers,
			MaxNumSeqs:          c.MaxNumSeqs,
			MaxBatchedTokens:    c.MaxBatchedTokens,
			StepFixed:           c.StepFixed,
			StepPerDecodeSeq:    c.StepDecodePerSeq,
			StepPerPrefillToken: c.StepPrefillPerToken,
		},
	}
}

// Validate rejects bad flag values with one line per reason (exit status 2).
func (c *cli) Validate(kctx *kong.Context) error {
	if err := cmdline.ApplyMillis(kctx); err != nil {
		return err
	}
	if c.TimeScale <= 0 {
		return errTimeScale
	}
	return errors.Join(c.Limits.Validate(), c.Tracing.Validate(), c.config().Validate())
}

func (c *cli) Run() error {
	logger, err := c.Common.Logger()
	if err != nil {
		return cmdline.Config(err)
	}
	tracer, stopTracing, err := c.Tracing.Start("engine", version)
	if err != nil {
		return cmdline.Config(err)
	}
	defer flushTraces(stopTracing)
	eng, err := mock.New(c.config(), mock.Deps{Logger: logger, Tracer: tracer})
	if err != nil {
		return cmdline.Config(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return eng.Run(ctx)
}

// options are the kong options of the command line (shared with the tests).
func options() []kong.Option {
	return cmdline.Options("engine",
		"Switchyard engine: mock OpenAI-compatible inference engine with a realistic timing model and prefix KV cache.", version)
}

// flushTraces sends the spans still buffered, waiting at most 5 s.
func flushTraces(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = stop(ctx)
}

func main() { cmdline.Main(&cli{}, options()...) }

var errTimeScale = errors.New("--time-scale must be > 0")

// Command engine is the Switchyard mock inference engine: an OpenAI-compatible server with
// a seeded timing model (legacy or continuous batching), a prefix KV cache, an NDJSON
// stats stream, vLLM-style metrics and fault injection.
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/engines/latency"
	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/tlsx"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type cli struct {
	Version kong.VersionFlag `short:"V" help:"Print version and exit." env:"-"`

	HTTPListenAddr        string   `name:"http-listen-addr" default:"127.0.0.1:8090" help:"Listen address."`
	ModelName             []string `name:"model-name" default:"dummy-model" sep:"," help:"Served model name (repeatable; the first is the default)."`
	NumTokens             int      `name:"num-tokens" default:"10" help:"Default number of output tokens."`
	TokenDelayMs          float64  `name:"token-delay-ms" default:"100" help:"Delay before each token after the first (legacy)."`
	DecodeJitterMs        float64  `name:"decode-jitter-ms" default:"0" help:"Bound of the deterministic per-token jitter (legacy)."`
	TTFTMs                float64  `name:"ttft-ms" default:"0" help:"Fixed delay before the first token (legacy)."`
	TTFTJitterMs          float64  `name:"ttft-jitter-ms" default:"0" help:"Bound of the deterministic TTFT jitter (legacy)."`
	PrefillTokensPerS     float64  `name:"prefill-tokens-per-s" default:"0" help:"Prefill rate in tokens/s (legacy); 0 = no prefill delay."`
	MaxConcurrentRequests int      `name:"max-concurrent-requests" default:"0" help:"Requests generating at once; 0 = unlimited."`
	HealthDelayMs         float64  `name:"health-delay-ms" default:"0" help:"Delay of GET /health."`
	KVCacheCapacityTokens uint64   `name:"kv-cache-capacity-tokens" default:"0" help:"Prefix KV cache capacity in tokens (per worker); 0 = no cache."`
	EngineModel           string   `name:"engine-model" default:"legacy" enum:"legacy,batched" help:"Timing model: legacy or batched."`
	Seed                  uint64   `name:"seed" default:"0" help:"Seed mixed into jitter, generated IDs and embeddings (0 = reference jitter)."`
	TimeScale             float64  `name:"time-scale" default:"1.0" help:"Multiplies every delay."`
	NumGPUWorkers         int      `name:"num-gpu-workers" default:"1" help:"Workers in the batched model."`
	MaxNumSeqs            int      `name:"max-num-seqs" default:"25" help:"Running sequences per worker (batched)."`
	MaxBatchedTokens      int      `name:"max-batched-tokens" default:"2048" help:"Token budget per step (batched)."`
	StepFixedMs           float64  `name:"step-fixed-ms" default:"4" help:"Fixed step time (batched)."`
	StepDecodeMsPerSeq    float64  `name:"step-decode-ms-per-seq" default:"0.085" help:"Step time per decoding sequence (batched)."`
	StepPrefillMsPerToken float64  `name:"step-prefill-ms-per-token" default:"0.05" help:"Step time per prefill token (batched)."`
	MaxRequestBodyBytes   int      `name:"max-request-body-bytes" default:"16777216" help:"Largest accepted request body; larger gets 413."`
	ReadBufferBytes       int      `name:"read-buffer-bytes" default:"4096" help:"Per-connection read buffer; caps request header size (larger headers get 431). Released while a stream is open."`
	WriteBufferBytes      int      `name:"write-buffer-bytes" default:"1024" help:"Per-connection write buffer, held for the life of a stream."`
	TLSCertFile           string   `name:"tls-cert-file" type:"path" help:"PEM certificate: serve HTTPS (re-read when it changes)."`
	TLSKeyFile            string   `name:"tls-key-file" type:"path" help:"PEM private key of --tls-cert-file."`
	LogLevel              string   `name:"log-level" default:"info" enum:"debug,info,warn,error" help:"Log level."`
	EnableTestControl     bool     `name:"enable-test-control" help:"Serve the fault-injection endpoints under /test-control (tests and benchmarks only: anyone who reaches the engine can then inject failures, hangs and delays). Off: they answer 404."`
	// The listener's connection limits.
	Limits httpserver.Flags `embed:""`
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func (c *cli) config() mock.Config {
	return mock.Config{
		ListenAddr:             c.HTTPListenAddr,
		ModelNames:             c.ModelName,
		NumTokens:              c.NumTokens,
		TokenDelay:             ms(c.TokenDelayMs),
		DecodeJitter:           ms(c.DecodeJitterMs),
		TTFT:                   ms(c.TTFTMs),
		TTFTJitter:             ms(c.TTFTJitterMs),
		PrefillTokensPerSecond: c.PrefillTokensPerS,
		MaxConcurrentRequests:  c.MaxConcurrentRequests,
		HealthDelay:            ms(c.HealthDelayMs),
		KVCacheCapacityTokens:  c.KVCacheCapacityTokens,
		EngineModel:            c.EngineModel,
		Seed:                   c.Seed,
		TimeScale:              c.TimeScale,
		MaxRequestBodyBytes:    c.MaxRequestBodyBytes,
		ReadBufferBytes:        c.ReadBufferBytes,
		WriteBufferBytes:       c.WriteBufferBytes,
		TLS:                    tlsx.ServerOptions{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile},
		EnableTestControl:      c.EnableTestControl,
		ServerLimits:           c.Limits.Limits(),
		Batched: latency.BatchedConfig{
			Workers:             c.NumGPUWorkers,
			MaxNumSeqs:          c.MaxNumSeqs,
			MaxBatchedTokens:    c.MaxBatchedTokens,
			StepFixed:           ms(c.StepFixedMs),
			StepPerDecodeSeq:    ms(c.StepDecodeMsPerSeq),
			StepPerPrefillToken: ms(c.StepPrefillMsPerToken),
		},
	}
}

// Validate rejects bad flag values with one line per reason (kong exits non-zero).
func (c *cli) Validate() error {
	if c.TimeScale <= 0 {
		return errTimeScale
	}
	return errors.Join(c.Limits.Validate(), c.config().Validate())
}

func (c *cli) Run() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	eng, err := mock.New(c.config(), mock.Deps{Logger: logger})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return eng.Run(ctx)
}

func main() {
	var c cli
	ctx := kong.Parse(&c,
		kong.Name("engine"),
		kong.Description("Switchyard engine: mock OpenAI-compatible inference engine with a realistic timing model and prefix KV cache."),
		kong.UsageOnError(),
		kong.DefaultEnvars("SWITCHYARD_ENGINE"),
		kong.Vars{"version": "engine " + version},
	)
	if err := ctx.Run(); err != nil {
		ctx.Errorf("%v", err)
		os.Exit(1)
	}
}

var errTimeScale = errors.New("--time-scale must be > 0")

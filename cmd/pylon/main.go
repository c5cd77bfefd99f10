// Command pylon is the Switchyard pylon: the sidecar next to one inference engine that
// registers with every gateway, publishes load stats, runs local queue admission and
// relays requests to the engine while observing the stream.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/internal/cmdline"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/internal/tracing"
	"github.com/switchyard/switchyard/pylon"
	"github.com/switchyard/switchyard/pylon/admission"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type cli struct {
	// --version, --config, --log-format, --log-level.
	Common cmdline.Flags `embed:""`
	// --otlp-endpoint, --trace-sample.
	Tracing tracing.Flags `embed:""`

	HTTPListenAddr               string        `name:"http-listen-addr" default:"127.0.0.1:8100" help:"Data path listen address: requests relayed from gateways and their /health probe."`
	AdminListenAddr              string        `name:"admin-listen-addr" default:"127.0.0.1:8101" help:"Admin listen address: /metrics, /healthz, /readyz, /debug/engine and, with --enable-pprof, /debug/pprof (empty = none). It has no authentication: keep it on loopback or a private address."`
	EnablePprof                  bool          `name:"enable-pprof" help:"Serve Go's CPU, heap and goroutine profiles under /debug/pprof/ on the admin listener (operators only; off by default)."`
	UpstreamHTTPBaseURL          string        `name:"upstream-http-base-url" required:"" help:"Engine base URL, e.g. http://127.0.0.1:8090."`
	ModelName                    []string      `name:"model-name" sep:"," help:"Served model (repeatable); omitted = discover from GET /v1/models."`
	Gateway                      []string      `name:"gateway" sep:"," help:"A gateway's admin URL to register with, e.g. http://127.0.0.1:8001 (repeatable)."`
	GatewayDNS                   string        `name:"gateway-dns" placeholder:"[https://]HOST:PORT" help:"DNS name whose addresses are gateway replicas' admin listeners (e.g. a headless Service); the pylon registers with every address and follows changes. Prefix https:// to register over TLS."`
	GatewayDNSInterval           time.Duration `name:"gateway-dns-interval" default:"5s" help:"How often --gateway-dns is re-resolved."`
	ActiveCanaryInterval         time.Duration `name:"active-canary-interval" default:"5s" help:"Period of the canary completion sent to the engine (0 disables canaries); a failing or runaway canary advertises the models INACTIVE."`
	BringupCanaryTimeout         time.Duration `name:"bringup-canary-timeout" default:"5s" help:"Longest wait for a canary's answer."`
	CanaryMaxGenerationThreshold int           `name:"canary-max-generation-threshold" default:"237" help:"The canary's max_tokens; a canary that generates exactly this many tokens is a runaway generation (1: a liveness check only, for reasoning models)."`
	AdvertiseURL                 string        `name:"advertise-url" help:"How gateways reach this pylon (default http://<listen addr>)."`
	InferenceServerID            string        `name:"inference-server-id" default:"pylon" help:"Backend id."`
	ClusterID                    string        `name:"cluster-id" help:"Cluster id (default = inference server id)."`
	MaxEngineConcurrency         uint64        `name:"max-engine-concurrency" default:"0" help:"Fallback engine concurrency limit per model (0 = none); engine pings take precedence."`
	InitialInputTPS              float64       `name:"initial-input-tps" default:"0" help:"Bootstrap input tokens/s for every model (0 = none)."`
	BenchmarkPinInputTPS         bool          `name:"benchmark-pin-input-tps" hidden:"" help:"Keep --initial-input-tps fixed."`
	WaitForUpstream              time.Duration `name:"wait-for-upstream" default:"0s" help:"Before calibrating and registering, wait until the engine answers GET /v1/models, at most this long (then exit 1); 0 registers at once."`
	DoCalibration                bool          `name:"do-calibration" help:"Calibrate input tokens/s with synthetic requests before registering (only for a cluster's sole pylon; excludes --initial-input-tps)."`
	CalibrationRequests          int           `name:"calibration-requests" default:"5" help:"Calibration: request count of the first step (doubles per step)."`
	CalibrationPromptUnit        int           `name:"calibration-prompt-units" default:"4096" help:"Calibration: largest prompt size in tokens (the ramp starts at 256 and doubles)."`
	CalibrationMaxConc           int           `name:"calibration-max-concurrency" default:"4" help:"Calibration: largest concurrency (starts at 1, +1 per step)."`
	CalibrationTimeout           time.Duration `name:"bringup-calibration-timeout" default:"30s" help:"Calibration: a step taking longer means the engine is saturated and ends the ramp."`
	EngineStatsStream            string        `name:"engine-stats-stream" default:"auto" enum:"auto,required,off" help:"Engine NDJSON stats stream: auto, required or off."`
	EngineStatsStreamPath        string        `name:"engine-stats-stream-path" default:"/pylon/v1/stats/stream" help:"Path of the engine stats stream."`
	EngineMetrics                string        `name:"engine-metrics" default:"off" enum:"off,vllm,sglang" help:"Scrape the engine's Prometheus /metrics: off, vllm or sglang."`
	KVCacheStatsPath             string        `name:"kv-cache-stats-path" help:"Engine path polled every second for KV cache stats (empty = off)."`
	MinUpdateInterval            time.Duration `name:"min-update-interval" default:"1s" help:"Registration heartbeat period (100ms to 1m)."`
	StatsUpdateCoalesce          time.Duration `name:"stats-update-coalesce" default:"10ms" help:"Minimum spacing of change-driven registration updates."`
	FullRegistrationInterval     time.Duration `name:"full-registration-interval" default:"30s" help:"Longest time between full registrations to a gateway that takes load updates; the heartbeats and changes in between send only the load while nothing else changed (0 = full registrations only)."`

	QueueAdmission             bool          `name:"queue-admission" default:"true" negatable:"" help:"Local queue admission."`
	QueueAdmissionMinDelta     time.Duration `name:"queue-admission-min-delta" default:"25ms" help:"Additive admission tolerance (whole milliseconds)."`
	QueueAdmissionTolerance    float64       `name:"queue-admission-tolerance" default:"1.25" help:"Multiplicative admission tolerance."`
	QueueAdmissionFreeSlot     bool          `name:"queue-admission-require-free-slot" default:"true" negatable:"" help:"Refuse (429 queue_estimate_mismatch) a request whose gateway expected no queue when the engine runs its known concurrency limit: it would wait for a running request to end, which no queue estimate prices. Several gateways that each saw the last slot free are caught here and retried elsewhere."`
	EngineSlotShare            uint64        `name:"engine-slot-share" default:"0" help:"When several pylons front one engine: the number of its concurrency slots this pylon may fill. A request its gateway expected no queue for is refused (with --queue-admission-require-free-slot) while this pylon's own requests fill the share, so the pylons, whose shares should add up to the engine's limit, cannot overfill the engine between them before its figures show the other pylons' requests. Needs --queue-admission and --queue-admission-require-free-slot, which enforce it (0 = the whole engine, by the engine's figures alone)."`
	EngineSlotShareWait        time.Duration `name:"engine-slot-share-wait" default:"30s" help:"With --engine-slot-share: the longest an admitted request that would take this pylon's own requests at the engine past its share (one the gateway priced with a queue, or sent without an estimate as its last attempt) waits in the pylon for one of them to finish, in admission order, before it goes to the engine regardless; the engine never runs more of this pylon's requests than its share meanwhile (0 = no wait: the engine queues it)."`
	QueueMismatchRetryAfter    time.Duration `name:"queue-mismatch-retry-after" default:"0s" help:"x-stargate-retry-after-ms on admission 429s, in whole milliseconds (0 = none)."`
	UpstreamBackend            string        `name:"upstream-backend" default:"passthrough" enum:"passthrough,dynamo" help:"dynamo adds x-dynamo-request-priority headers; passthrough adds none."`
	PriorityCeiling            uint32        `name:"priority-ceiling" default:"3600" help:"Dynamo priority = max(0, ceiling − x-priority)."`
	RetryableStatusCodes       []int         `name:"retryable-upstream-status-codes" default:"429,503" sep:"," help:"Engine statuses that may be marked retryable."`
	RequireUpstreamRetryHeader bool          `name:"require-upstream-retry-header" default:"true" negatable:"" help:"Require the engine's retry header before marking a response retryable."`
	UpstreamRetryHeader        string        `name:"upstream-retry-header" default:"x-stargate-upstream-retryable" help:"Engine → pylon retry signal header."`
	PropagateRetryAfter        bool          `name:"propagate-retry-after" default:"true" negatable:"" help:"Convert the engine's Retry-After to x-stargate-retry-after-ms."`
	LocalConnectFailRetryable  bool          `name:"local-connect-failures-retryable" help:"Also mark retryable the engine failures that may have left work on the engine (a connection it closed while still accepting new ones, the first-output timeout, a shutdown's abort). An unreachable engine (no connection can be made) is always answered retryable."`
	ModelDiscoveryPoll         time.Duration `name:"model-discovery-poll-interval" default:"5s" help:"Model discovery poll period."`
	DrainTimeout               time.Duration `name:"drain-timeout" default:"30s" help:"Longest wait for in-flight requests on SIGTERM; then their engine and client connections are closed."`
	PromptWait                 time.Duration `name:"prompt-wait" default:"30s" help:"Longest wait of a request with an x-cache-affinity-key for the same key's prompt that the engine is prefilling for an earlier request (from any gateway): it is relayed once that prompt is cached and prefills only its own suffix, instead of the whole shared prefix beside it (0 = never wait)."`
	PromptCachedAt             string        `name:"prompt-cached-at" default:"first-output" enum:"first-output,headers" help:"When a prompt counts as cached for --prompt-wait: first-output (the answer's first output byte; engines that send streamed headers before the prefill, as vLLM and SGLang do) or headers (engines that send headers only once the prompt is prefilled, as the bundled mock engine does)."`
	FirstOutputTimeout         time.Duration `name:"first-output-timeout" default:"30s" help:"Longest wait for the engine's first response bytes (the whole answer when not streamed): 504 problem+json (0 = none)."`
	StreamIdleTimeout          time.Duration `name:"stream-idle-timeout" default:"30s" help:"Longest wait for more response bytes once the engine has started answering: the stream is cut (0 = none)."`
	EngineCheckTimeout         time.Duration `name:"engine-check-timeout" default:"1s" help:"Engine liveness check: every half of this the pylon sends the engine GET /health on a new connection and wants the first byte of an answer within it. Three checks in a row unanswered mark the engine unresponsive (frozen or stuck): the requests waiting for its first byte, and new ones until a check passes, are answered 503 local_connect_failure, retryable, so gateways retry them elsewhere at once instead of after --first-output-timeout, and its streams silent for two check timeouts end with an error event (0 = no checks)."`
	RequireStreaming           bool          `name:"require-streaming" help:"Reject chat and responses bodies without \"stream\": true (400)."`
	ControlToken               string        `name:"control-token" help:"Bearer token presented to the gateways' control endpoint (prefer --control-token-file or SWITCHYARD_PYLON_CONTROL_TOKEN: a flag shows in the process list)."`
	ControlTokenFile           string        `name:"control-token-file" type:"path" help:"File holding the gateways' control token; re-read when it changes (Kubernetes Secret volumes). Excludes --control-token."`
	TLSCertFile                string        `name:"tls-cert-file" type:"path" help:"PEM certificate: the data and admin listeners serve TLS (advertised URL https://). Re-read when it changes."`
	TLSKeyFile                 string        `name:"tls-key-file" type:"path" help:"PEM private key of --tls-cert-file."`
	TLSClientCAFile            string        `name:"tls-client-ca-file" type:"path" help:"PEM CA bundle: gateways must present a client certificate it signed on the data listener (mutual TLS; needs --tls-cert-file)."`
	TLSCAFile                  string        `name:"tls-ca-file" type:"path" help:"PEM CA bundle that verifies https gateways and an https engine (default: the system roots)."`
	TLSServerName              string        `name:"tls-server-name" help:"Name expected in the gateways' certificates instead of the address dialled (e.g. the headless Service's name when --gateway-dns yields pod IPs)."`
	TLSClientCertFile          string        `name:"tls-client-cert-file" type:"path" help:"PEM client certificate presented to gateways when registering (mutual TLS); re-read when it changes."`
	TLSClientKeyFile           string        `name:"tls-client-key-file" type:"path" help:"PEM private key of --tls-client-cert-file."`
	MetricsPrefix              string        `name:"metrics-prefix" default:"pylon_" help:"Prefix of every metric name."`
	MetricsReferenceNames      bool          `name:"metrics-reference-names" help:"Also export the reference router's metric names in ms and tokens/s (queue_admission_expected_ms, queue_admission_actual_ms, model_output_tps, model_last_mean_input_tps, model_max_output_tps, model_calibration_duration_ms) next to their _seconds and _tokens_per_second forms (promtool flags the _ms names)."`
	RawSocketIO                bool          `name:"raw-socket-io" default:"true" negatable:"" help:"Read and write the data, admin and engine connections with raw syscalls on Linux, sparing the Go runtime's syscall bookkeeping (it wakes the sysmon thread on the first read or write after an idle spell); --no-raw-socket-io uses net.Conn's own calls, as fasthttp does by default. The engine timeouts work the same either way."`
	MaxRequestBodyBytes        int           `name:"max-request-body-bytes" default:"67108864" help:"Largest accepted request body (larger: 413 problem+json)."`
	// The data and admin listeners' connection limits (each listener has its own cap).
	Limits httpserver.Flags `embed:""`

	// The millisecond forms of the durations above, from before they took Go durations
	// (deployments and the bench pass them); hidden, applied by cmdline.ApplyMillis.
	GatewayDNSIntervalMs      uint64 `name:"gateway-dns-interval-ms" hidden:"" millis-of:"gateway-dns-interval" help:"--gateway-dns-interval in milliseconds."`
	ActiveCanaryIntervalMs    uint64 `name:"active-canary-interval-ms" hidden:"" millis-of:"active-canary-interval" help:"--active-canary-interval in milliseconds."`
	BringupCanaryTimeoutMs    uint64 `name:"bringup-canary-timeout-ms" hidden:"" millis-of:"bringup-canary-timeout" help:"--bringup-canary-timeout in milliseconds."`
	CalibrationTimeoutMs      uint64 `name:"bringup-calibration-timeout-ms" hidden:"" millis-of:"bringup-calibration-timeout" help:"--bringup-calibration-timeout in milliseconds."`
	MinUpdateIntervalMs       uint64 `name:"min-update-interval-ms" hidden:"" millis-of:"min-update-interval" help:"--min-update-interval in milliseconds."`
	StatsUpdateCoalesceMs     uint64 `name:"stats-update-coalesce-ms" hidden:"" millis-of:"stats-update-coalesce" help:"--stats-update-coalesce in milliseconds."`
	QueueAdmissionMinDeltaMs  uint64 `name:"queue-admission-min-delta-ms" hidden:"" millis-of:"queue-admission-min-delta" help:"--queue-admission-min-delta in milliseconds."`
	QueueMismatchRetryAfterMs uint64 `name:"queue-mismatch-retry-after-ms" hidden:"" millis-of:"queue-mismatch-retry-after" help:"--queue-mismatch-retry-after in milliseconds."`
	ModelDiscoveryPollMs      uint64 `name:"model-discovery-poll-interval-ms" hidden:"" millis-of:"model-discovery-poll-interval" help:"--model-discovery-poll-interval in milliseconds."`
	DrainTimeoutMs            uint64 `name:"drain-timeout-ms" hidden:"" millis-of:"drain-timeout" help:"--drain-timeout in milliseconds."`
	FirstOutputTimeoutMs      uint64 `name:"first-output-timeout-ms" hidden:"" millis-of:"first-output-timeout" help:"--first-output-timeout in milliseconds."`
	StreamIdleTimeoutMs       uint64 `name:"stream-idle-timeout-ms" hidden:"" millis-of:"stream-idle-timeout" help:"--stream-idle-timeout in milliseconds."`
}

func (c *cli) config() pylon.Config {
	cfg := pylon.DefaultConfig()
	cfg.ListenAddr, cfg.UpstreamBaseURL, cfg.ModelNames, cfg.Gateways = c.HTTPListenAddr, c.UpstreamHTTPBaseURL, c.ModelName, c.Gateway
	cfg.AdvertiseURL, cfg.ID, cfg.ClusterID = c.AdvertiseURL, c.InferenceServerID, c.ClusterID
	cfg.MaxEngineConcurrency, cfg.InitialInputTPS, cfg.PinInputTPS, cfg.DoCalibration = c.MaxEngineConcurrency, c.InitialInputTPS, c.BenchmarkPinInputTPS, c.DoCalibration
	cfg.WaitForUpstream = c.WaitForUpstream
	cfg.CalibrationRequests, cfg.CalibrationPromptUnits, cfg.CalibrationMaxConcurrency = c.CalibrationRequests, c.CalibrationPromptUnit, c.CalibrationMaxConc
	cfg.CalibrationTimeout = c.CalibrationTimeout
	cfg.EngineStatsStream, cfg.EngineStatsStreamPath, cfg.EngineMetrics, cfg.KVCacheStatsPath = c.EngineStatsStream, c.EngineStatsStreamPath, c.EngineMetrics, c.KVCacheStatsPath
	cfg.MinUpdateInterval, cfg.StatsUpdateCoalesce, cfg.FullRegistrationInterval = c.MinUpdateInterval, c.StatsUpdateCoalesce, c.FullRegistrationInterval
	cfg.GatewayDNS, cfg.GatewayDNSInterval = c.GatewayDNS, c.GatewayDNSInterval
	cfg.CanaryInterval, cfg.CanaryTimeout, cfg.CanaryThreshold = c.ActiveCanaryInterval, c.BringupCanaryTimeout, c.CanaryMaxGenerationThreshold
	cfg.Admission = admission.Config{Enabled: c.QueueAdmission, MinDeltaMs: wholeMs(c.QueueAdmissionMinDelta), Tolerance: c.QueueAdmissionTolerance, RequireFreeSlot: c.QueueAdmissionFreeSlot, SlotShare: c.EngineSlotShare, SlotShareWait: c.EngineSlotShareWait}
	cfg.QueueMismatchRetryAfterMs = wholeMs(c.QueueMismatchRetryAfter)
	cfg.UpstreamBackend, cfg.PriorityCeiling, cfg.RetryableStatusCodes = c.UpstreamBackend, c.PriorityCeiling, c.RetryableStatusCodes
	cfg.RequireUpstreamRetryHeader, cfg.UpstreamRetryHeader, cfg.PropagateRetryAfter = c.RequireUpstreamRetryHeader, c.UpstreamRetryHeader, c.PropagateRetryAfter
	cfg.LocalConnectFailuresRetryable, cfg.DiscoveryPollInterval, cfg.DrainTimeout = c.LocalConnectFailRetryable, c.ModelDiscoveryPoll, c.DrainTimeout
	cfg.ControlToken, cfg.ControlTokenFile, cfg.MetricsPrefix, cfg.MaxRequestBodyBytes = c.ControlToken, c.ControlTokenFile, c.MetricsPrefix, c.MaxRequestBodyBytes
	cfg.MetricsReferenceNames = c.MetricsReferenceNames
	cfg.AdminListenAddr, cfg.EnablePprof = c.AdminListenAddr, c.EnablePprof
	cfg.TLS = tlsx.ServerOptions{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, ClientCAFile: c.TLSClientCAFile}
	cfg.ClientTLS = tlsx.ClientOptions{CAFile: c.TLSCAFile, ServerName: c.TLSServerName, CertFile: c.TLSClientCertFile, KeyFile: c.TLSClientKeyFile}
	cfg.FirstOutputTimeout, cfg.StreamIdleTimeout, cfg.RequireStreaming = c.FirstOutputTimeout, c.StreamIdleTimeout, c.RequireStreaming
	cfg.EngineCheckTimeout = c.EngineCheckTimeout
	cfg.PromptWait, cfg.PromptCachedAt = c.PromptWait, c.PromptCachedAt
	cfg.ServerLimits = c.Limits.Limits()
	cfg.NoRawSocketIO = !c.RawSocketIO
	return cfg
}

// wholeMs is d in whole milliseconds, for the settings kept in milliseconds (negative
// values are rejected by Validate first).
func wholeMs(d time.Duration) uint64 { return uint64(max(d, 0) / time.Millisecond) }

// Validate rejects bad flag values with one line per reason (exit status 2).
func (c *cli) Validate(kctx *kong.Context) error {
	if err := cmdline.ApplyMillis(kctx); err != nil {
		return err
	}
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"queue-admission-min-delta", c.QueueAdmissionMinDelta}, {"queue-mismatch-retry-after", c.QueueMismatchRetryAfter}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %v must be ≥ 0", d.name, d.v))
		}
	}
	cfg := c.config()
	return errors.Join(errors.Join(errs...), c.Limits.Validate(), c.Tracing.Validate(), cfg.Validate())
}

func (c *cli) Run() error {
	logger, err := c.Common.Logger()
	if err != nil {
		return cmdline.Config(err)
	}
	tracer, stopTracing, err := c.Tracing.Start("pylon", version)
	if err != nil {
		return cmdline.Config(err)
	}
	defer flushTraces(stopTracing)
	p, err := pylon.New(c.config(), pylon.Deps{Logger: logger, Version: version, Tracer: tracer})
	if err != nil {
		return cmdline.Config(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return p.Run(ctx)
}

// options are the kong options of the command line (shared with the tests).
func options() []kong.Option {
	return cmdline.Options("pylon",
		"Switchyard pylon: sidecar next to one inference engine (registration, load stats, local queue admission, stream relay).", version)
}

// flushTraces exports the spans not yet sent and stops the exporter, waiting at most 5 s.
func flushTraces(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = stop(ctx)
}

func main() { cmdline.Main(&cli{}, options()...) }

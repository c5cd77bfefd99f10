package pylon

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/calibrate"
	"github.com/switchyard/switchyard/pylon/engine"
)

// Upstream backends (priority dialects).
const (
	BackendPassthrough = "passthrough"
	BackendDynamo      = "dynamo"
)

// Defaults of the pylon's flags.
const (
	DefaultListenAddr            = "127.0.0.1:8100"
	DefaultID                    = "pylon"
	DefaultStatsStreamPath       = "/pylon/v1/stats/stream"
	DefaultMinUpdateInterval     = time.Second
	DefaultStatsUpdateCoalesce   = 10 * time.Millisecond
	DefaultFullRegistration      = 30 * time.Second
	DefaultGatewayDNSInterval    = 5 * time.Second
	DefaultCanaryInterval        = 5 * time.Second
	DefaultCanaryTimeout         = 5 * time.Second
	DefaultCanaryThreshold       = 237
	DefaultPriorityCeiling       = 3600
	DefaultUpstreamRetryHeader   = "x-stargate-upstream-retryable"
	DefaultDiscoveryPollInterval = 5 * time.Second
	DefaultDrainTimeout          = 30 * time.Second
	DefaultMetricsPrefix         = "pylon_"
	DefaultMaxRequestBodyBytes   = 64 << 20
	DefaultCalibrationTimeout    = 30 * time.Second
	DefaultFirstOutputTimeout    = 30 * time.Second
	DefaultStreamIdleTimeout     = 30 * time.Second
	DefaultEngineCheckTimeout    = time.Second
	DefaultPromptWait            = 30 * time.Second
	// RetireGrace keeps a retired generation's actor answering "unavailable" before it stops.
	RetireGrace = time.Minute
)

// Config configures one pylon. Start from DefaultConfig.
type Config struct {
	ListenAddr string // data path: relayed requests and the gateways' /health probe (default 127.0.0.1:8100)
	// AdminListenAddr serves /metrics, /healthz and /readyz; "" = no admin listener (the
	// command line's default is 127.0.0.1:8101).
	AdminListenAddr string
	// EnablePprof serves Go's profiles under /debug/pprof/ on the admin listener
	// (operators only: the admin listener has no authentication).
	EnablePprof     bool
	UpstreamBaseURL string   // engine base URL (required)
	ModelNames      []string // served models; empty = discover from GET /v1/models
	Gateways        []string // gateway base URLs to register with
	// GatewayDNS is host:port (or https://host:port) of a DNS name whose A/AAAA records are
	// gateway replicas' admin listeners (a Kubernetes headless Service): re-resolved every
	// GatewayDNSInterval, the pylon registers with each address (http://ip:port, or https
	// with that prefix) and deregisters from vanished ones.
	GatewayDNS         string
	GatewayDNSInterval time.Duration
	// Canaries: every CanaryInterval (0 = off) a tiny completion (prompt "1+1=", max_tokens
	// CanaryThreshold) per model straight to the engine; a failure, a timeout
	// (CanaryTimeout) or exactly CanaryThreshold generated tokens (a runaway generation)
	// advertises every model INACTIVE until a canary passes again.
	CanaryInterval  time.Duration
	CanaryTimeout   time.Duration
	CanaryThreshold int
	AdvertiseURL    string // how gateways reach this pylon (default http://<listen addr>)
	ID              string // inference server id (default "pylon")
	ClusterID       string // default = ID

	MaxEngineConcurrency uint64  // CLI fallback for every model (0 = none)
	InitialInputTPS      float64 // bootstrap input tps (0 = none)
	PinInputTPS          bool    // keep InitialInputTPS fixed (benchmarks)
	DoCalibration        bool    // calibrate input tps before registering
	// WaitForUpstream makes the pylon wait, before calibrating and registering, until the
	// engine answers GET /v1/models, at most this long (then Run fails); 0 registers at
	// once.
	WaitForUpstream time.Duration

	CalibrationRequests       int           // first step's request count, doubles per step (5)
	CalibrationPromptUnits    int           // prompt size cap in tokens; the ramp starts at 256 (4096)
	CalibrationMaxConcurrency int           // concurrency starts at 1, +1 per step up to this (4)
	CalibrationTimeout        time.Duration // a step exceeding this = saturation → stop (30 s)

	EngineStatsStream     string // auto | required | off
	EngineStatsStreamPath string
	EngineMetrics         string // off | vllm | sglang
	KVCacheStatsPath      string // "" = no polling

	MinUpdateInterval   time.Duration // registration heartbeat (1 s)
	StatsUpdateCoalesce time.Duration // change-driven update spacing (10 ms)
	// FullRegistrationInterval is the longest time between full registrations to a
	// gateway that takes load updates (30 s); 0 sends full registrations only.
	FullRegistrationInterval time.Duration

	Admission                 admission.Config // Enabled true, 25 ms, 1.25, RequireFreeSlot by default
	QueueMismatchRetryAfterMs uint64           // optional retry hint on 429 (0 = none)

	UpstreamBackend            string // passthrough (default) | dynamo
	PriorityCeiling            uint32 // dynamo priority = max(0, ceiling − x-priority)
	RetryableStatusCodes       []int  // 429, 503
	RequireUpstreamRetryHeader bool   // true
	UpstreamRetryHeader        string // x-stargate-upstream-retryable
	PropagateRetryAfter        bool   // true
	// LocalConnectFailuresRetryable also marks retryable the engine failures that may
	// have left work on the engine: a connection it closed while it still accepts new
	// ones, the first-output timeout, a shutdown's abort (false). An unreachable engine is
	// retryable regardless.
	LocalConnectFailuresRetryable bool

	// FirstOutputTimeout bounds the wait from writing a request to the engine until its
	// first response bytes (for a non-streamed response, the whole answer): 504
	// problem+json when it passes (30 s; 0 = none).
	FirstOutputTimeout time.Duration
	// StreamIdleTimeout bounds every later wait for more response bytes, including the
	// wait between streamed response headers and the first event: the engine connection is
	// closed and the relayed stream cut (30 s; 0 = none).
	StreamIdleTimeout time.Duration
	// EngineCheckTimeout is the engine liveness check's bound: every EngineCheckTimeout/2
	// the pylon sends the engine a request on a new connection and wants the first byte of
	// an answer within EngineCheckTimeout; three checks in a row without one mark the engine
	// unresponsive (frozen, stuck): the requests waiting for its first byte are answered
	// 503 local_connect_failure, retryable, and so is every new one until a check passes
	// (1 s; 0 = no checks). See enginedown.go.
	EngineCheckTimeout time.Duration
	// NoRawSocketIO makes the data, admin and engine connections read and write through
	// net.Conn's own calls instead of raw syscalls (--raw-socket-io=false; see
	// internal/relay/rawio.go). The engine timeouts work the same either way.
	NoRawSocketIO bool
	// PromptWait bounds how long a request with an x-cache-affinity-key waits for the
	// same key's prompt the engine is prefilling for an earlier request (from any gateway)
	// to be cached, instead of prefilling the shared prefix beside it (30 s; 0 = never
	// wait). PromptCachedAt says when a prompt counts as cached: PromptCachedAtFirstOutput
	// (default) or PromptCachedAtHeaders.
	PromptWait     time.Duration
	PromptCachedAt string
	// RequireStreaming rejects chat and responses bodies without "stream": true with 400
	// (off by default: streaming is optional here, unlike in the reference pylon, which
	// always requires it).
	RequireStreaming bool

	// ControlToken or ControlTokenFile (re-read on change) is the bearer token presented to
	// the gateways' control endpoint.
	ControlToken     string
	ControlTokenFile string
	// TLS serves the data and admin listeners over TLS when its certificate is set; its
	// ClientCAFile makes the data listener require gateways' client certificates (mutual
	// TLS). ClientTLS verifies https gateways (registration) and an https engine, and
	// presents a client certificate to them when one is set.
	TLS       tlsx.ServerOptions
	ClientTLS tlsx.ClientOptions

	MetricsPrefix string // pylon_
	// MetricsReferenceNames also exports the reference router's names of the series whose
	// units are not base units (queue_admission_*_ms, model_*_tps,
	// model_calibration_duration_ms) next to their _seconds and _tokens_per_second forms.
	MetricsReferenceNames bool
	DiscoveryPollInterval time.Duration
	// DrainTimeout bounds a shutdown's wait for in-flight requests; past it their engine
	// connections and then their client connections are closed.
	DrainTimeout        time.Duration
	MaxRequestBodyBytes int // larger bodies get 413 problem+json (64 MiB)
	// ServerLimits are both listeners' connection limits: header, body and idle timeouts,
	// the connection cap and the memory large request bodies may hold (zero fields: the
	// defaults of package httpserver).
	ServerLimits httpserver.Limits
}

// DefaultConfig returns the documented defaults (UpstreamBaseURL still has to be set).
func DefaultConfig() Config {
	return Config{
		ListenAddr: DefaultListenAddr, ID: DefaultID,
		EngineStatsStream: engine.ModeAuto, EngineStatsStreamPath: DefaultStatsStreamPath, EngineMetrics: "off",
		MinUpdateInterval: DefaultMinUpdateInterval, StatsUpdateCoalesce: DefaultStatsUpdateCoalesce, FullRegistrationInterval: DefaultFullRegistration,
		GatewayDNSInterval: DefaultGatewayDNSInterval,
		CanaryInterval:     DefaultCanaryInterval, CanaryTimeout: DefaultCanaryTimeout, CanaryThreshold: DefaultCanaryThreshold,
		Admission:       admission.Config{Enabled: true, MinDeltaMs: admission.DefaultMinDeltaMs, Tolerance: admission.DefaultTolerance, RequireFreeSlot: true, SlotShareWait: admission.DefaultSlotShareWait},
		UpstreamBackend: BackendPassthrough, PriorityCeiling: DefaultPriorityCeiling,
		RetryableStatusCodes: []int{429, 503}, RequireUpstreamRetryHeader: true, UpstreamRetryHeader: DefaultUpstreamRetryHeader,
		PropagateRetryAfter: true, MetricsPrefix: DefaultMetricsPrefix, DiscoveryPollInterval: DefaultDiscoveryPollInterval,
		DrainTimeout: DefaultDrainTimeout, MaxRequestBodyBytes: DefaultMaxRequestBodyBytes,
		CalibrationRequests: calibrate.DefaultRequests, CalibrationPromptUnits: calibrate.DefaultPromptUnits,
		CalibrationMaxConcurrency: calibrate.DefaultMaxConcurrency, CalibrationTimeout: DefaultCalibrationTimeout,
		FirstOutputTimeout: DefaultFirstOutputTimeout, StreamIdleTimeout: DefaultStreamIdleTimeout,
		EngineCheckTimeout: DefaultEngineCheckTimeout,
		PromptWait:         DefaultPromptWait, PromptCachedAt: PromptCachedAtFirstOutput,
	}
}

// ErrConfig is the class of configuration errors.
var ErrConfig = errors.New("invalid pylon config")

// Validate returns one precise error per bad field, joined.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	if u, err := url.Parse(c.UpstreamBaseURL); c.UpstreamBaseURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("upstream-http-base-url %q must be an http(s)://host:port URL", c.UpstreamBaseURL)
	}
	for _, g := range c.Gateways {
		if u, err := url.Parse(g); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("gateway %q must be an http(s) URL", g)
		}
	}
	if c.CanaryInterval < 0 || (c.CanaryInterval > 0 && (c.CanaryTimeout <= 0 || c.CanaryThreshold <= 0)) {
		bad("active-canary-interval must be >= 0, and with canaries bringup-canary-timeout and canary-max-generation-threshold > 0")
	}
	if c.GatewayDNS != "" {
		if _, host, port, err := splitGatewayDNS(c.GatewayDNS); err != nil || host == "" || port == "" {
			bad("gateway-dns %q must be host:port, http://host:port or https://host:port", c.GatewayDNS)
		}
		if c.GatewayDNSInterval <= 0 {
			bad("gateway-dns-interval must be > 0")
		}
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		bad("http-listen-addr %q: %v", c.ListenAddr, err)
	}
	if c.AdminListenAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdminListenAddr); err != nil {
			bad("admin-listen-addr %q: %v", c.AdminListenAddr, err)
		}
	}
	if c.ControlToken != "" && c.ControlTokenFile != "" {
		bad("control-token and control-token-file are mutually exclusive")
	}
	seen := map[string]bool{}
	for _, m := range c.ModelNames {
		if m == "" || seen[m] {
			bad("model-name %q is empty or repeated", m)
		}
		seen[m] = true
	}
	if c.ID == "" {
		bad("inference-server-id must not be empty")
	}
	if math.IsNaN(c.InitialInputTPS) || math.IsInf(c.InitialInputTPS, 0) || c.InitialInputTPS < 0 {
		bad("initial-input-tps %v must be a finite value ≥ 0", c.InitialInputTPS)
	}
	if c.DoCalibration && c.InitialInputTPS > 0 {
		bad("do-calibration and initial-input-tps are mutually exclusive")
	}
	switch c.EngineStatsStream {
	case engine.ModeAuto, engine.ModeRequired, engine.ModeOff:
	default:
		bad("engine-stats-stream %q must be auto, required or off", c.EngineStatsStream)
	}
	switch c.EngineMetrics {
	case "off", "", engine.DialectVLLM, engine.DialectSGLang:
	default:
		bad("engine-metrics %q must be off, vllm or sglang", c.EngineMetrics)
	}
	switch c.PromptCachedAt {
	case "", PromptCachedAtFirstOutput, PromptCachedAtHeaders:
	default:
		bad("prompt-cached-at %q must be first-output or headers", c.PromptCachedAt)
	}
	if c.PromptWait < 0 {
		bad("prompt-wait %v must not be negative", c.PromptWait)
	}
	switch c.UpstreamBackend {
	case BackendPassthrough, BackendDynamo:
	default:
		bad("upstream-backend %q must be passthrough or dynamo", c.UpstreamBackend)
	}
	if c.MinUpdateInterval < 100*time.Millisecond || c.MinUpdateInterval > time.Minute {
		bad("min-update-interval %v must be between 100ms and 1m (the heartbeat gateways accept)", c.MinUpdateInterval)
	}
	if c.StatsUpdateCoalesce < 0 {
		bad("stats-update-coalesce must be ≥ 0")
	}
	if c.FullRegistrationInterval < 0 {
		bad("full-registration-interval must be ≥ 0")
	}
	if c.Admission.SlotShare > 0 && (!c.Admission.Enabled || !c.Admission.RequireFreeSlot) {
		bad("engine-slot-share is enforced by queue admission's free-slot rule: it needs --queue-admission and --queue-admission-require-free-slot")
	}
	if c.Admission.SlotShareWait < 0 {
		bad("engine-slot-share-wait %v must not be negative", c.Admission.SlotShareWait)
	}
	if t := c.Admission.Tolerance; math.IsNaN(t) || math.IsInf(t, 0) || t <= 0 {
		bad("queue-admission-tolerance %v must be a finite value > 0", t)
	}
	for _, s := range c.RetryableStatusCodes {
		if s < 400 || s > 599 {
			bad("retryable status %d must be 400–599", s)
		}
	}
	if c.DiscoveryPollInterval <= 0 || c.DrainTimeout < 0 || c.MaxRequestBodyBytes <= 0 {
		bad("model-discovery-poll-interval, drain-timeout and max-request-body-bytes must be positive")
	}
	if err := c.ServerLimits.Validate(); err != nil {
		bad("%v", err)
	}
	if c.FirstOutputTimeout < 0 {
		bad("first-output-timeout must be ≥ 0 (0 = none)")
	}
	if c.StreamIdleTimeout < 0 {
		bad("stream-idle-timeout must be ≥ 0 (0 = none)")
	}
	if c.EngineCheckTimeout < 0 {
		bad("engine-check-timeout must be ≥ 0 (0 = no checks)")
	}
	if c.DoCalibration {
		if c.CalibrationRequests <= 0 || c.CalibrationPromptUnits <= 0 || c.CalibrationMaxConcurrency <= 0 {
			bad("calibration-requests, calibration-prompt-units and calibration-max-concurrency must be > 0")
		}
		if c.CalibrationTimeout <= 0 {
			bad("bringup-calibration-timeout must be > 0")
		}
		if c.PinInputTPS {
			bad("do-calibration and benchmark-pin-input-tps are mutually exclusive")
		}
	}
	return errors.Join(errs...)
}

// splitGatewayDNS splits GatewayDNS into scheme (http unless given), host and port.
func splitGatewayDNS(v string) (scheme, host, port string, err error) {
	scheme = "http"
	switch {
	case strings.HasPrefix(v, "https://"):
		scheme, v = "https", strings.TrimPrefix(v, "https://")
	case strings.HasPrefix(v, "http://"):
		v = strings.TrimPrefix(v, "http://")
	}
	host, port, err = net.SplitHostPort(strings.TrimSuffix(v, "/"))
	return scheme, host, port, err //nolint:wrapcheck // the caller names the flag
}

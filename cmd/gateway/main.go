// Command gateway is the Switchyard router: an OpenAI-compatible front end that routes
// each request to the pylon with the best TTFT estimate and streams the response back.
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

	"github.com/switchyard/switchyard/gateway"
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
	// --otlp-endpoint, --trace-sample.
	Tracing tracing.Flags `embed:""`

	HTTPListenAddr               string        `name:"http-listen-addr" help:"Public listen address: the OpenAI API (/v1/...), /healthz and /readyz. Nothing here changes routing." default:"127.0.0.1:8000"`
	AdminListenAddr              string        `name:"admin-listen-addr" help:"Admin listen address: the control endpoint pylons register on (/control/v1/backends), /metrics, /debug/state and /debug/pprof. On a non-loopback address the gateway refuses to start without a control token (or --insecure-no-control-auth)." default:"127.0.0.1:8001"`
	ControlTokenFile             string        `name:"control-token-file" help:"File holding the bearer token every admin request (pylon registrations, /debug, /metrics) must present; re-read when it changes (Kubernetes Secret volumes). Excludes --control-token." default:"" type:"path"`
	InsecureNoControlAuth        bool          `name:"insecure-no-control-auth" help:"Allow an admin listener on a non-loopback address without a control token: anyone who reaches it can register backends and take over traffic. Logged as a warning."`
	MetricsNoAuth                bool          `name:"metrics-no-auth" help:"Serve /metrics on the admin listener without the control token (for scrapers that cannot send one)."`
	PublicMetrics                bool          `name:"public-metrics" help:"Also serve /metrics on the public listener (it names every backend and model: off by default)."`
	MaxAdminBodyBytes            int           `name:"max-admin-body-bytes" help:"Largest request body on the admin listener (a registration); larger gets 413." default:"1048576"`
	MaxModelsPerBackend          int           `name:"max-models-per-backend" help:"Most models one pylon registration may name; more gets 400." default:"256"`
	TargetCollectGrace           time.Duration `name:"target-collect-grace" help:"How long a routing target (routing key + model) whose last backend left keeps its scheduler; then it is collected and its parked requests answered." default:"30s"`
	SeriesRetention              time.Duration `name:"series-retention" help:"How long the metric series of a backend (inference_server_id) or a cluster (cluster_id) that left the fleet, and of a routing target (routing_key, model) no backend serves any more, stay on /metrics, so that scrapes see their last values; then they are dropped, which keeps /metrics and memory bounded as pods and models come and go (0 = keep them as long as the gateway runs)." default:"10m"`
	TLSCertFile                  string        `name:"tls-cert-file" help:"PEM certificate: both listeners serve TLS. Re-read when it changes (served to the next new connection)." default:"" type:"path"`
	TLSKeyFile                   string        `name:"tls-key-file" help:"PEM private key of --tls-cert-file." default:"" type:"path"`
	AdminTLSClientCAFile         string        `name:"admin-tls-client-ca-file" help:"PEM CA bundle: pylons must present a client certificate it signed on the admin listener (mutual TLS; needs --tls-cert-file)." default:"" type:"path"`
	TLSCAFile                    string        `name:"tls-ca-file" help:"PEM CA bundle that verifies pylons registered with an https:// URL (default: the system roots)." default:"" type:"path"`
	TLSServerName                string        `name:"tls-server-name" help:"Name expected in pylons' certificates instead of the host of their registered URL (e.g. when pylons register pod IPs)." default:""`
	TLSClientCertFile            string        `name:"tls-client-cert-file" help:"PEM client certificate presented to pylons (mutual TLS on the data path); re-read when it changes." default:"" type:"path"`
	TLSClientKeyFile             string        `name:"tls-client-key-file" help:"PEM private key of --tls-client-cert-file." default:"" type:"path"`
	GatewayID                    string        `name:"gateway-id" help:"Name of this replica in dispatch sequences sent to pylons (default: random)." default:""`
	LBConfigPath                 string        `name:"lb-config-path" help:"lb-config.json; reloaded on SIGHUP and when the file changes (an invalid new file is rejected and the old one kept). Without it: power-of-n, every algorithm selectable by x-routing-method." default:"" type:"path"`
	ProxyMaxConnectRetries       int           `name:"proxy-max-connect-retries" help:"Transport-failure retries on another backend of the same cluster." default:"2"`
	ProxyMaxRequestRetries       int           `name:"proxy-max-request-retries" help:"Retries after a retryable 429/503 from a pylon." default:"2"`
	ProxyMaxReplayBodyBytes      int           `name:"proxy-max-replay-body-bytes" help:"Largest request body (kept for replay on retries); larger bodies get 413." default:"67108864"`
	ProxyRequirePylonRetrySignal bool          `name:"proxy-require-pylon-retry-signal" help:"Retry 429/503 only when the pylon sets x-stargate-retryable: true." default:"true" negatable:""`
	ProxyRetryBudgetHeader       string        `name:"proxy-retry-budget-header" help:"Request header carrying the retry budget in ms from arrival (empty disables)." default:"x-stargate-max-wait-ms"`
	HealthProbeInterval          time.Duration `name:"health-probe-interval" help:"RTT probe period per backend (GET /health through the data pool)." default:"1s"`
	Heartbeat                    time.Duration `name:"heartbeat" help:"Heartbeat expected from pylons that do not say theirs; a backend expires after 3 missed heartbeats." default:"1s"`
	MinBackendExpiry             time.Duration `name:"min-backend-expiry" help:"A backend expires after 3 missed heartbeats, but never sooner than this." default:"3s"`
	WorkerCredentialsFile        string        `name:"worker-credentials-file" help:"Per-pylon registration credentials, one '<inference-server-id> <token>' per line ('*' = any pylon), re-read when it changes: a pylon may register with a token listed for its id instead of the control token." default:"" type:"path"`
	ControlToken                 string        `name:"control-token" help:"Bearer token every admin request must present (prefer --control-token-file or the SWITCHYARD_GATEWAY_CONTROL_TOKEN variable: a flag shows in the process list). Empty = no auth, allowed only on a loopback admin address." default:""`
	MetricsPrefix                string        `name:"metrics-prefix" help:"Prefix of every metric name." default:"switchyard_"`
	DrainTimeout                 time.Duration `name:"drain-timeout" help:"On SIGTERM, how long in-flight requests and streams may drain." default:"30s"`
	ShutdownDelay                time.Duration `name:"shutdown-delay" help:"On SIGTERM, keep serving this long with /readyz answering 503 before closing the listener (give load balancers time to notice)." default:"0s"`
	StartupGrace                 time.Duration `name:"startup-grace" help:"For this long after start, a request for a model no backend has registered yet waits for one (pylons register again with their next heartbeat after a gateway restart) instead of getting 404 no_eligible_candidates at once (0 = no wait)." default:"3s"`
	UpstreamHeadersTimeout       time.Duration `name:"upstream-headers-timeout" help:"Longest wait for the first bytes of a pylon's response; a stream then runs unbounded." default:"30s"`
	LegacyInputWorkErrorCode     bool          `name:"legacy-input-work-error-code" help:"Answer input-work admission rejections (max_input_work_seconds) with the error code input_work_limit_exceeded, as older gateways did, instead of overloaded_error." default:"false"`
	FirstByteTimeoutFactor       float64       `name:"first-byte-timeout-factor" help:"A streamed request's attempt waits for the pylon's first byte at most this many times the backend's TTFT estimate (within the floor and --upstream-headers-timeout), then is retried on another backend; 0 disables." default:"4"`
	FirstByteTimeoutFloor        time.Duration `name:"first-byte-timeout-floor" help:"Shortest first-byte deadline of an attempt." default:"2s"`
	OutlierConsecutiveFailures   int           `name:"outlier-consecutive-failures" help:"Failures in a row (connect failures, first-byte timeouts, a pylon whose engine is unreachable, failed health probes) that eject a backend from routing; 0 disables ejection." default:"3"`
	OutlierBaseEjection          time.Duration `name:"outlier-base-ejection" help:"First ejection's length; it doubles with each ejection in a row (a successful request resets it)." default:"1s"`
	OutlierMaxEjection           time.Duration `name:"outlier-max-ejection" help:"Longest ejection." default:"30s"`
	OutlierMaxEjectionPercent    int           `name:"outlier-max-ejection-percent" help:"Most backends of one routing target ejected at once, in percent (always at least one; 100: all may be)." default:"50"`
	ClusterBackends              string        `name:"cluster-backends" enum:"spread,lead" default:"spread" help:"How a request picks the backend (pylon) of its chosen cluster: spread (a keyed request to the one its key ranks first, a sibling with a free slot when that one is full; others round-robin) or lead (every request through the backend the cluster id ranks first, the same on every gateway replica, the others on failure: its pylon then sees every request on its way to the shared engine, so replicas cannot overfill it; see docs/replicas.md for what it costs)."`
	AccessLogSample              float64       `name:"access-log-sample" help:"Share of requests written to the access log (0–1, chosen at random): one 'access' record each at info with the request id, model, routing key, algorithm, backend, cluster, attempts, status, error code, TTFT, duration and input tokens. 0: off (a record costs microseconds at the gateway's request rate)." default:"0"`
	AccessLogErrors              bool          `name:"access-log-errors" help:"Also write every request answered with a status other than 2xx to the access log, whatever --access-log-sample says."`
	EnablePprof                  bool          `name:"enable-pprof" help:"Serve Go's CPU, heap and goroutine profiles under /debug/pprof/ (operators only; off by default)."`
	RawSocketIO                  bool          `name:"raw-socket-io" default:"true" negatable:"" help:"Read and write the client, admin and pylon connections with raw syscalls on Linux, sparing the Go runtime's syscall bookkeeping (it wakes the sysmon thread on the first read or write after an idle spell); --no-raw-socket-io uses net.Conn's own calls, as fasthttp does by default. Timeouts and deadlines work the same either way."`
	Seed                         uint64        `help:"Seed of the balancers' randomness (samples, tie-breaks), mixed with --gateway-id so that replicas draw different sequences; a replica with a fixed --gateway-id and --seed draws the same one on every start." default:"0"`
	// The public and admin listeners' connection limits (each listener has its own cap).
	Limits httpserver.Flags `embed:""`

	// The millisecond forms of the durations above, from before they took Go durations;
	// hidden, applied by cmdline.ApplyMillis.
	HealthProbeIntervalMs int `name:"health-probe-interval-ms" hidden:"" millis-of:"health-probe-interval" help:"--health-probe-interval in milliseconds."`
	HeartbeatMs           int `name:"heartbeat-ms" hidden:"" millis-of:"heartbeat" help:"--heartbeat in milliseconds."`
	MinBackendExpiryMs    int `name:"min-backend-expiry-ms" hidden:"" millis-of:"min-backend-expiry" help:"--min-backend-expiry in milliseconds."`
}

// Validate rejects bad flag values with one line per reason (exit status 2).
func (c *cli) Validate(kctx *kong.Context) error {
	if err := cmdline.ApplyMillis(kctx); err != nil {
		return err
	}
	var errs []error
	if c.HealthProbeInterval <= 0 {
		errs = append(errs, fmt.Errorf("--health-probe-interval %v must be > 0", c.HealthProbeInterval))
	}
	if c.Heartbeat <= 0 {
		errs = append(errs, fmt.Errorf("--heartbeat %v must be > 0", c.Heartbeat))
	}
	if c.MinBackendExpiry < 0 {
		errs = append(errs, fmt.Errorf("--min-backend-expiry %v must be ≥ 0", c.MinBackendExpiry))
	}
	if c.ProxyMaxConnectRetries < 0 || c.ProxyMaxRequestRetries < 0 {
		errs = append(errs, errors.New("--proxy-max-connect-retries and --proxy-max-request-retries must be >= 0"))
	}
	if c.SeriesRetention < 0 {
		errs = append(errs, fmt.Errorf("--series-retention %v must be ≥ 0 (0 keeps the series)", c.SeriesRetention))
	}
	if c.MaxModelsPerBackend <= 0 || c.TargetCollectGrace <= 0 {
		errs = append(errs, errors.New("--max-models-per-backend and --target-collect-grace must be > 0"))
	}
	if c.MaxAdminBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("--max-admin-body-bytes %d must be > 0", c.MaxAdminBodyBytes))
	}
	if c.ProxyMaxReplayBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("--proxy-max-replay-body-bytes %d must be > 0", c.ProxyMaxReplayBodyBytes))
	}
	if c.FirstByteTimeoutFactor < 0 || c.FirstByteTimeoutFloor <= 0 || c.OutlierConsecutiveFailures < 0 ||
		c.OutlierBaseEjection <= 0 || c.OutlierMaxEjection < c.OutlierBaseEjection || c.OutlierMaxEjectionPercent <= 0 || c.OutlierMaxEjectionPercent > 100 {
		errs = append(errs, errors.New("--first-byte-timeout-factor and --outlier-consecutive-failures must be >= 0, --first-byte-timeout-floor and "+
			"--outlier-base-ejection > 0, --outlier-max-ejection at least the base, --outlier-max-ejection-percent within 1–100"))
	}
	if !(c.AccessLogSample >= 0 && c.AccessLogSample <= 1) {
		errs = append(errs, fmt.Errorf("--access-log-sample %v must be within 0–1", c.AccessLogSample))
	}
	errs = append(errs, c.Limits.Validate(), c.Tracing.Validate())
	return errors.Join(errs...)
}

// retries maps a retry-count flag (0: none) to Config's encoding (0: the default).
func retries(n int) int {
	if n == 0 {
		return gateway.NoRetries
	}
	return n
}

// offIfZero maps a flag's 0 (off: no first-byte factor, series kept) to Config's -1
// (zero means the default there).
func offIfZero[T float64 | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

func (c *cli) config() gateway.Config {
	return gateway.Config{
		ListenAddr: c.HTTPListenAddr, GatewayID: c.GatewayID, LBConfigPath: c.LBConfigPath,
		MaxConnectRetries: retries(c.ProxyMaxConnectRetries), MaxRequestRetries: retries(c.ProxyMaxRequestRetries),
		MaxReplayBodyBytes: c.ProxyMaxReplayBodyBytes, NoRequirePylonRetrySig: !c.ProxyRequirePylonRetrySignal,
		RetryBudgetHeader: c.ProxyRetryBudgetHeader, NoRetryBudgetHeader: c.ProxyRetryBudgetHeader == "",
		HealthProbeInterval: c.HealthProbeInterval,
		Heartbeat:           c.Heartbeat,
		MinExpiry:           max(c.MinBackendExpiry, time.Millisecond),
		AdminListenAddr:     c.AdminListenAddr, ControlToken: c.ControlToken, ControlTokenFile: c.ControlTokenFile,
		InsecureNoControlAuth: c.InsecureNoControlAuth, WorkerCredentialsFile: c.WorkerCredentialsFile, MetricsNoAuth: c.MetricsNoAuth, PublicMetrics: c.PublicMetrics,
		MaxAdminBodyBytes: c.MaxAdminBodyBytes, MaxModelsPerBackend: c.MaxModelsPerBackend, TargetCollectGrace: c.TargetCollectGrace,
		SeriesRetention:   offIfZero(c.SeriesRetention),
		TLS:               tlsx.ServerOptions{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile},
		AdminClientCAFile: c.AdminTLSClientCAFile,
		UpstreamTLS:       tlsx.ClientOptions{CAFile: c.TLSCAFile, ServerName: c.TLSServerName, CertFile: c.TLSClientCertFile, KeyFile: c.TLSClientKeyFile},
		MetricsPrefix:     c.MetricsPrefix, DrainTimeout: c.DrainTimeout, ShutdownDelay: c.ShutdownDelay, StartupGrace: c.StartupGrace,
		HeadersTimeout: c.UpstreamHeadersTimeout, Seed: c.Seed, EnablePprof: c.EnablePprof,
		FirstByteTimeoutFactor: offIfZero(c.FirstByteTimeoutFactor), FirstByteTimeoutFloor: c.FirstByteTimeoutFloor,
		OutlierConsecutiveFailures: retries(c.OutlierConsecutiveFailures), OutlierBaseEjection: c.OutlierBaseEjection,
		OutlierMaxEjection: c.OutlierMaxEjection, OutlierMaxEjectionPercent: c.OutlierMaxEjectionPercent, ClusterBackends: c.ClusterBackends,
		ServerLimits: c.Limits.Limits(), LegacyInputWorkErrorCode: c.LegacyInputWorkErrorCode,
		AccessLogSample: c.AccessLogSample, AccessLogErrors: c.AccessLogErrors, NoRawSocketIO: !c.RawSocketIO,
	}
}

func (c *cli) Run() error {
	logger, err := c.Common.Logger()
	if err != nil {
		return cmdline.Config(err)
	}
	tracer, stopTracing, err := c.Tracing.Start("gateway", version)
	if err != nil {
		return cmdline.Config(err)
	}
	defer flushTraces(stopTracing)
	g, err := gateway.New(c.config(), gateway.Deps{Now: time.Now, Logger: logger, Tracer: tracer})
	if err != nil {
		return cmdline.Config(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = g.Reload()
			}
		}
	}()
	return g.Run(ctx)
}

// options are the kong options of the command line (shared with the tests).
func options() []kong.Option {
	return cmdline.Options("gateway",
		"Switchyard gateway: OpenAI-compatible LLM request router. It estimates TTFT (RTT + queue + prefill) on every candidate engine, waits and widens over TTFT buckets, keeps prompt-cache affinity, honours engine concurrency, retries with exclusions and streams responses back.",
		version)
}

// flushTraces exports the spans not yet sent and stops the exporter, waiting at most 5 s.
func flushTraces(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = stop(ctx)
}

func main() { cmdline.Main(&cli{}, options()...) }

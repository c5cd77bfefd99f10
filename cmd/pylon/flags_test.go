package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/cmdline/cmdlinetest"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
	"github.com/switchyard/switchyard/pylon"
)

func TestMain(m *testing.M) { mocktest.Main(m) }

// timing is the part of the configuration the duration flags set.
type timing struct {
	DNS, Canary, CanaryTimeout, Calibration, Heartbeat, Coalesce, Discovery, Drain, FirstOutput, StreamIdle time.Duration
	MinDeltaMs, RetryAfterMs                                                                                uint64
}

func timingOf(cfg pylon.Config) timing {
	return timing{
		cfg.GatewayDNSInterval, cfg.CanaryInterval, cfg.CanaryTimeout, cfg.CalibrationTimeout, cfg.MinUpdateInterval, cfg.StatsUpdateCoalesce,
		cfg.DiscoveryPollInterval, cfg.DrainTimeout, cfg.FirstOutputTimeout, cfg.StreamIdleTimeout, cfg.Admission.MinDeltaMs, cfg.QueueMismatchRetryAfterMs,
	}
}

// The same settings as durations in a YAML file, as the older millisecond keys in a
// JSON file and as millisecond flags give the same configuration.
func TestDurationsFromFileAndMillisecondForms(t *testing.T) {
	want := timing{
		2 * time.Second, 0, 3 * time.Second, 10 * time.Second, 200 * time.Millisecond, 5 * time.Millisecond,
		time.Minute, 15 * time.Second, 45 * time.Second, 20 * time.Second, 40, 250,
	}
	yamlFile := cmdlinetest.WriteConfig(t, "pylon.yaml", `upstream_http_base_url: http://127.0.0.1:8090
model_name: [a, b]
gateway_dns_interval: 2s
active_canary_interval: 0s
bringup_canary_timeout: 3s
bringup_calibration_timeout: 10s
min_update_interval: 200ms
stats_update_coalesce: 5ms
model_discovery_poll_interval: 1m
drain_timeout: 15s
first_output_timeout: 45s
stream_idle_timeout: 20s
queue_admission_min_delta: 40ms
queue_mismatch_retry_after: 250ms
log_format: json
`)
	jsonFile := cmdlinetest.WriteConfig(t, "pylon.json", `{"upstream-http-base-url": "http://127.0.0.1:8090", "model-name": ["a", "b"],
"gateway_dns_interval_ms": 2000, "active_canary_interval_ms": 0, "bringup_canary_timeout_ms": 3000,
"bringup_calibration_timeout_ms": 10000, "min_update_interval_ms": 200, "stats_update_coalesce_ms": 5,
"model_discovery_poll_interval_ms": 60000, "drain_timeout_ms": 15000, "first_output_timeout_ms": 45000,
"stream_idle_timeout_ms": 20000, "queue_admission_min_delta_ms": 40, "queue_mismatch_retry_after_ms": 250, "log_format": "json"}`)
	flags := []string{
		"--upstream-http-base-url=http://127.0.0.1:8090", "--model-name=a,b", "--log-format=json",
		"--gateway-dns-interval-ms=2000", "--active-canary-interval-ms=0", "--bringup-canary-timeout-ms=3000",
		"--bringup-calibration-timeout-ms=10000", "--min-update-interval-ms=200", "--stats-update-coalesce-ms=5",
		"--model-discovery-poll-interval-ms=60000", "--drain-timeout-ms=15000", "--first-output-timeout-ms=45000",
		"--stream-idle-timeout-ms=20000", "--queue-admission-min-delta-ms=40", "--queue-mismatch-retry-after-ms=250",
	}
	for name, args := range map[string][]string{"yaml": {"--config", yamlFile}, "json": {"--config", jsonFile}, "ms flags": flags} {
		c, err := parse(t, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, timingOf(c.config())); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff([]string{"a", "b"}, c.ModelName); diff != "" || c.Common.LogFormat != "json" {
			t.Errorf("%s: model names (-want +got):\n%s log format %q", name, diff, c.Common.LogFormat)
		}
	}
	if _, err := parse(t, "--upstream-http-base-url=http://127.0.0.1:8090", "--queue-admission-min-delta=-1ms"); err == nil ||
		!strings.Contains(err.Error(), "--queue-admission-min-delta -1ms must be ≥ 0") {
		t.Errorf("negative admission delta: %v", err)
	}
}

// A config file with a misspelt key stops the pylon at start: exit status 2, the key named.
func TestConfigTypoExitsWithStatus2(t *testing.T) {
	cfg := cmdlinetest.WriteConfig(t, "pylon.yaml", "upstream_http_base_url: http://127.0.0.1:1\nmin_update_intervall: 1s\n")
	bin := mocktest.Binary(t, "../pylon") // built before the deadline starts
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--config", cfg).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("%v, want exit status 2\n%s", err, out)
	}
	if !strings.Contains(string(out), `unknown key "min_update_intervall" (did you mean "min_update_interval"?)`) {
		t.Errorf("the message does not name the key:\n%s", out)
	}
}

// --log-format json on the real binary, next to a mock engine and with an unreachable
// gateway: every stderr line is one JSON object with at most one component attribute
// (the actor system's and the registrars' lines included); SIGTERM exits 0.
func TestJSONLogsHaveOneComponent(t *testing.T) {
	engineBin, pylonBin := mocktest.Binary(t, "../engine"), mocktest.Binary(t, "../pylon") // built before the deadline starts
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	engineAddr := mocktest.FreeAddr(t)
	engine := exec.CommandContext(ctx, engineBin, "--http-listen-addr", engineAddr, "--log-level", "warn")
	if err := engine.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = engine.Process.Signal(syscall.SIGTERM)
		_ = engine.Wait()
	}()
	cmd := mocktest.Command(ctx, pylonBin, "--log-format", "json",
		"--http-listen-addr", mocktest.FreeAddr(t), "--admin-listen-addr", mocktest.FreeAddr(t),
		"--upstream-http-base-url", "http://"+engineAddr, "--initial-input-tps", "1000", "--gateway", "http://127.0.0.1:1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	components := map[string]bool{}
	for sc := bufio.NewScanner(stderr); sc.Scan(); {
		line := sc.Text()
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line is not JSON: %v\n%s", err, line)
			continue
		}
		if n := strings.Count(line, `"component":`); n > 1 {
			t.Errorf("component appears %d times: %s", n, line)
		}
		if c, ok := rec["component"].(string); ok {
			components[c] = true
		}
		if rec["msg"] == "registration_failed" {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", err)
	}
	for _, c := range []string{"pylon", "registrar", "actors"} {
		if !components[c] {
			t.Errorf("no line from component %s (saw %v)", c, components)
		}
	}
}

// The example in docs/configuration.md parses and validates.
func TestDocExample(t *testing.T) {
	c, err := parse(t, "--config", cmdlinetest.DocExample(t, "../../docs/configuration.md", "pylon"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.config(); cfg.GatewayDNS == "" || cfg.DrainTimeout != 30*time.Second || len(cfg.ModelNames) != 1 {
		t.Errorf("gateway dns %q, drain timeout %v, models %v", cfg.GatewayDNS, cfg.DrainTimeout, cfg.ModelNames)
	}
}

// --raw-socket-io is on by default and turned off by the flag, the environment or a file.
func TestRawSocketIOFlag(t *testing.T) {
	cmdlinetest.RawSocketIO(t, "SWITCHYARD_PYLON_RAW_SOCKET_IO", "pylon.yaml", func(args ...string) (bool, error) {
		c, err := parse(t, append([]string{"--upstream-http-base-url", "http://127.0.0.1:8090"}, args...)...)
		if err != nil {
			return false, err
		}
		return c.config().NoRawSocketIO, nil
	})
}

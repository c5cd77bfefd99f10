package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/cmdline/cmdlinetest"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func parseArgs(t *testing.T, args ...string) (*cli, error) {
	t.Helper()
	var c cli
	k, err := kong.New(&c, append(options(), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Parse(args)
	return &c, err
}

// The duration flags take Go durations; the older millisecond flags (which the bench
// passes) still give the same configuration.
func TestDurationFlagsAndTheirMillisecondForms(t *testing.T) {
	type timing struct{ TokenDelay, DecodeJitter, TTFT, TTFTJitter, HealthDelay, StepFixed, StepDecode, StepPrefill time.Duration }
	of := func(c *cli) timing {
		cfg := c.config()
		return timing{
			cfg.TokenDelay, cfg.DecodeJitter, cfg.TTFT, cfg.TTFTJitter, cfg.HealthDelay,
			cfg.Batched.StepFixed, cfg.Batched.StepPerDecodeSeq, cfg.Batched.StepPerPrefillToken,
		}
	}
	defaults, err := parseArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	want := timing{100 * time.Millisecond, 0, 0, 0, 0, 4 * time.Millisecond, 85 * time.Microsecond, 50 * time.Microsecond}
	if diff := cmp.Diff(want, of(defaults)); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	want = timing{
		5 * time.Millisecond, time.Millisecond, 20 * time.Millisecond, 2 * time.Millisecond, 1500 * time.Microsecond,
		3 * time.Millisecond, 100 * time.Microsecond, 40 * time.Microsecond,
	}
	durations, err := parseArgs(t, "--token-delay=5ms", "--decode-jitter=1ms", "--ttft=20ms", "--ttft-jitter=2ms", "--health-delay=1.5ms",
		"--step-fixed=3ms", "--step-decode-per-seq=100us", "--step-prefill-per-token=40us")
	if err != nil {
		t.Fatal(err)
	}
	millis, err := parseArgs(t, "--token-delay-ms=5", "--decode-jitter-ms=1", "--ttft-ms=20", "--ttft-jitter-ms=2", "--health-delay-ms=1.5",
		"--step-fixed-ms=3", "--step-decode-ms-per-seq=0.1", "--step-prefill-ms-per-token=0.04")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*cli{"durations": durations, "milliseconds": millis} {
		if diff := cmp.Diff(want, of(c)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if _, err := parseArgs(t, "--token-delay=-5ms"); err == nil || !strings.Contains(err.Error(), "token-delay") {
		t.Errorf("--token-delay=-5ms: %v, want an error naming the flag", err)
	}
}

// A config file with a misspelt key stops the engine before it serves: exit status 2
// and a message naming the key. A bad flag value exits 2 too.
func TestBadConfigExitsWithStatus2(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(cfg, []byte("http_listen_addr: 127.0.0.1:0\ntoken_dealy: 5ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--config", cfg}, []string{`unknown key "token_dealy"`, `did you mean "token_delay"?`}},
		{[]string{"--http-listen-addr", "127.0.0.1:0", "--time-scale", "0"}, []string{"--time-scale must be > 0"}},
	} {
		bin := mocktest.Binary(t, "../engine") // built before the deadline starts
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		out, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit status 2\n%s", tc.args, err, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%v: output does not contain %q:\n%s", tc.args, w, out)
			}
		}
	}
}

// --log-format json: every stderr line is one JSON object; SIGTERM exits 0.
func TestJSONLogsAndCleanExit(t *testing.T) {
	bin := mocktest.Binary(t, "../engine") // built before the deadline starts
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := mocktest.Command(ctx, bin, "--http-listen-addr", mocktest.FreeAddr(t), "--log-format", "json", "--log-level", "debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var got []map[string]any
	for lines.Scan() {
		line := lines.Text()
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line is not JSON: %v\n%s", err, line)
			continue
		}
		got = append(got, rec)
		if rec["msg"] == "engine_serving" {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", err)
	}
	if len(got) == 0 || got[0]["msg"] != "engine_serving" || got[0]["component"] != "engine" || got[0]["level"] != "INFO" {
		t.Errorf("records %v, want engine_serving first (component engine, level INFO)", got)
	}
}

// The example in docs/configuration.md parses and validates.
func TestDocExample(t *testing.T) {
	c, err := parseArgs(t, "--config", cmdlinetest.DocExample(t, "../../docs/configuration.md", "engine"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.config(); cfg.EngineModel != "batched" || cfg.Batched.StepPerDecodeSeq != 85*time.Microsecond || cfg.Batched.Workers != 2 {
		t.Errorf("engine model %q, step per decoding sequence %v, workers %d", cfg.EngineModel, cfg.Batched.StepPerDecodeSeq, cfg.Batched.Workers)
	}
}

// --metrics-names picks the name set of /metrics: native by default, vllm from the flag,
// the environment or the config file; anything else is refused.
func TestMetricsNamesFlag(t *testing.T) {
	defaults, err := parseArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	if got := defaults.config().MetricsNames; got != mock.MetricsNamesNative {
		t.Errorf("default %q, want native", got)
	}
	file := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(file, []byte("metrics_names: vllm\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{"flag": {"--metrics-names=vllm"}, "config file": {"--config", file}} {
		c, err := parseArgs(t, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := c.config().MetricsNames; got != mock.MetricsNamesVLLM {
			t.Errorf("%s: %q, want vllm", name, got)
		}
	}
	if _, err := parseArgs(t, "--metrics-names=prometheus"); err == nil || !strings.Contains(err.Error(), "metrics-names") {
		t.Errorf("--metrics-names=prometheus: %v, want an error naming the flag", err)
	}
	t.Setenv("SWITCHYARD_ENGINE_METRICS_NAMES", "vllm")
	c, err := parseArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.config().MetricsNames; got != mock.MetricsNamesVLLM {
		t.Errorf("environment: %q, want vllm", got)
	}
}

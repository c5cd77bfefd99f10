package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/cmdline/cmdlinetest"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func parse(t *testing.T, args ...string) (*cli, error) {
	t.Helper()
	var c cli
	k, err := kong.New(&c, append(options(), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Parse(args)
	return &c, err
}

// The heartbeat, probe and expiry settings as durations, as the older millisecond flags
// and from a config file; the command line beats the environment, which beats the file.
func TestDurationFlagsConfigFileAndPrecedence(t *testing.T) {
	type timing struct{ Probe, Heartbeat, MinExpiry, Drain time.Duration }
	of := func(c *cli) timing {
		cfg := c.config()
		return timing{cfg.HealthProbeInterval, cfg.Heartbeat, cfg.MinExpiry, cfg.DrainTimeout}
	}
	file := cmdlinetest.WriteConfig(t, "gateway.yaml", "heartbeat: 2s\nhealth_probe_interval: 500ms\nmin-backend-expiry: 4s\ndrain_timeout: 10s\n")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want timing
	}{
		{"defaults", nil, nil, timing{time.Second, time.Second, 3 * time.Second, 30 * time.Second}},
		{
			"durations",
			[]string{"--heartbeat=250ms", "--health-probe-interval=2s", "--min-backend-expiry=1s"},
			nil,
			timing{2 * time.Second, 250 * time.Millisecond, time.Second, 30 * time.Second},
		},
		{
			"milliseconds",
			[]string{"--heartbeat-ms=250", "--health-probe-interval-ms=2000", "--min-backend-expiry-ms=1000"},
			nil,
			timing{2 * time.Second, 250 * time.Millisecond, time.Second, 30 * time.Second},
		},
		{"file", []string{"--config", file}, nil, timing{500 * time.Millisecond, 2 * time.Second, 4 * time.Second, 10 * time.Second}},
		{
			"flag > env > file",
			[]string{"--config", file, "--heartbeat=3s"},
			map[string]string{"SWITCHYARD_GATEWAY_HEARTBEAT": "5s", "SWITCHYARD_GATEWAY_DRAIN_TIMEOUT": "1m", "SWITCHYARD_GATEWAY_HEALTH_PROBE_INTERVAL_MS": "700"},
			timing{700 * time.Millisecond, 3 * time.Second, 4 * time.Second, time.Minute},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, of(c)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := parse(t, "--heartbeat=0s"); err == nil || !strings.Contains(err.Error(), "--heartbeat 0s must be > 0") {
		t.Errorf("--heartbeat=0s: %v", err)
	}
}

// The typo from the issue: a misspelt key fails start-up with exit status 2 and names
// the key; before, the JSON loader ignored it and the gateway ran with the default.
func TestConfigTypoExitsWithStatus2(t *testing.T) {
	bin := mocktest.Binary(t, "../gateway")
	for _, tc := range []struct{ name, body string }{
		{"gateway.yaml", "http_listen_addr: 127.0.0.1:0\nhartbeat_ms: 500\n"},
		{"gateway.json", `{"http_listen_addr": "127.0.0.1:0", "hartbeat_ms": 500}`},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		out, err := exec.CommandContext(ctx, bin, "--config", cmdlinetest.WriteConfig(t, tc.name, tc.body)).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%s: %v, want exit status 2\n%s", tc.name, err, out)
		}
		if !strings.Contains(string(out), `unknown key "hartbeat_ms" (did you mean "heartbeat_ms"?)`) {
			t.Errorf("%s: the message does not name the key:\n%s", tc.name, out)
		}
	}
}

// --log-format json (here from the environment): every stderr line is one JSON object
// with a single component attribute; SIGTERM exits 0.
func TestJSONLogsAndCleanExit(t *testing.T) {
	bin := mocktest.Binary(t, "../gateway") // built before the deadline starts
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := mocktest.Command(ctx, bin,
		"--http-listen-addr", mocktest.FreeAddr(t), "--admin-listen-addr", mocktest.FreeAddr(t), "--log-level", "debug")
	cmd.Env = append(os.Environ(), "SWITCHYARD_GATEWAY_LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var msgs []string
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
		msg, _ := rec["msg"].(string)
		msgs = append(msgs, msg)
		if msg == "gateway_listening" {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", err)
	}
	if !strings.Contains(strings.Join(msgs, " "), "gateway_listening") {
		t.Errorf("messages %q, want gateway_listening", msgs)
	}
}

// The example in docs/configuration.md parses and validates.
func TestDocExample(t *testing.T) {
	c, err := parse(t, "--config", cmdlinetest.DocExample(t, "../../docs/configuration.md", "gateway"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Heartbeat != time.Second || c.ShutdownDelay != 5*time.Second || c.Common.LogFormat != "json" {
		t.Errorf("heartbeat %v, shutdown delay %v, log format %q", c.Heartbeat, c.ShutdownDelay, c.Common.LogFormat)
	}
}

// --raw-socket-io is on by default and turned off by the flag, the environment or a file.
func TestRawSocketIOFlag(t *testing.T) {
	cmdlinetest.RawSocketIO(t, "SWITCHYARD_GATEWAY_RAW_SOCKET_IO", "gateway.yaml", func(args ...string) (bool, error) {
		c, err := parse(t, args...)
		if err != nil {
			return false, err
		}
		return c.config().NoRawSocketIO, nil
	})
}

// --cluster-backends: spread by default, lead when asked, anything else refused.
func TestClusterBackendsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{{nil, "spread"}, {[]string{"--cluster-backends=lead"}, "lead"}} {
		c, err := parse(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := c.config().ClusterBackends; got != tc.want {
			t.Errorf("%v: ClusterBackends %q, want %q", tc.args, got, tc.want)
		}
	}
	if _, err := parse(t, "--cluster-backends=random"); err == nil {
		t.Error("--cluster-backends=random accepted")
	}
}

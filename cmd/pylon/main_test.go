package main

import (
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/deploy/deploytest"
	"github.com/switchyard/switchyard/pylon"
)

// parse parses args (and the environment) like main, without running or exiting.
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

func TestEngineTimeoutAndStreamingFlags(t *testing.T) {
	base := []string{"--upstream-http-base-url", "http://127.0.0.1:8090"}
	for _, tc := range []struct {
		name             string
		args             []string
		env              map[string]string
		first, idle      time.Duration
		requireStreaming bool
	}{
		{"defaults", nil, nil, 30 * time.Second, 30 * time.Second, false},
		{"flags", []string{"--first-output-timeout-ms", "1500", "--stream-idle-timeout-ms", "0", "--require-streaming"}, nil, 1500 * time.Millisecond, 0, true},
		{"env", nil, map[string]string{
			"SWITCHYARD_PYLON_FIRST_OUTPUT_TIMEOUT_MS": "0", "SWITCHYARD_PYLON_STREAM_IDLE_TIMEOUT_MS": "45000",
			"SWITCHYARD_PYLON_REQUIRE_STREAMING": "true",
		}, 0, 45 * time.Second, true},
		{"flag beats env", []string{"--first-output-timeout-ms", "2000"}, map[string]string{"SWITCHYARD_PYLON_FIRST_OUTPUT_TIMEOUT_MS": "9000"}, 2 * time.Second, 30 * time.Second, false},
		{"durations", []string{"--first-output-timeout", "1.5s", "--stream-idle-timeout", "0"}, nil, 1500 * time.Millisecond, 0, false},
		{"duration env", nil, map[string]string{"SWITCHYARD_PYLON_FIRST_OUTPUT_TIMEOUT": "2m"}, 2 * time.Minute, 30 * time.Second, false},
		{"duration flag beats ms env", []string{"--first-output-timeout", "3s"}, map[string]string{"SWITCHYARD_PYLON_FIRST_OUTPUT_TIMEOUT_MS": "9000"}, 3 * time.Second, 30 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parseWithEnv(t, tc.env, append(base, tc.args...)...)
			cfg := c.config()
			if cfg.FirstOutputTimeout != tc.first || cfg.StreamIdleTimeout != tc.idle || cfg.RequireStreaming != tc.requireStreaming {
				t.Errorf("first output %v, stream idle %v, require streaming %v; want %v, %v, %v",
					cfg.FirstOutputTimeout, cfg.StreamIdleTimeout, cfg.RequireStreaming, tc.first, tc.idle, tc.requireStreaming)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestBadTimeoutIsRejected(t *testing.T) {
	_, err := parse(t, "--upstream-http-base-url", "http://127.0.0.1:8090", "--stream-idle-timeout-ms", "-1")
	if err == nil || !strings.Contains(err.Error(), "stream-idle-timeout-ms") {
		t.Errorf("--stream-idle-timeout-ms -1: %v, want a parse error naming the flag", err)
	}
}

// The arguments deploy/*.yaml gives the pylon parse and validate.
func TestDeployManifestArgs(t *testing.T) {
	for _, args := range deploytest.Args(t, "pylon") {
		if _, err := parse(t, args...); err != nil { // parsing validates
			t.Errorf("%v: %v", args, err)
		}
	}
}

// --engine-slot-share (or its environment variable) reaches the admission config; the
// default is no share.
func TestEngineSlotShareFlag(t *testing.T) {
	base := []string{"--upstream-http-base-url", "http://127.0.0.1:8090"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want uint64
		wait time.Duration
	}{
		{"default", nil, nil, 0, 30 * time.Second},
		{"flag", []string{"--engine-slot-share", "6", "--engine-slot-share-wait", "5s"}, nil, 6, 5 * time.Second},
		{"env", nil, map[string]string{"SWITCHYARD_PYLON_ENGINE_SLOT_SHARE": "12", "SWITCHYARD_PYLON_ENGINE_SLOT_SHARE_WAIT": "0s"}, 12, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parseWithEnv(t, tc.env, append(base, tc.args...)...)
			if got := c.config().Admission; got.SlotShare != tc.want || got.SlotShareWait != tc.wait {
				t.Errorf("slot share %d, wait %v; want %d, %v", got.SlotShare, got.SlotShareWait, tc.want, tc.wait)
			}
		})
	}
	if got := pylon.DefaultConfig().Admission.SlotShareWait; got != 30*time.Second {
		t.Errorf("the library's default wait %v, want the flag's 30s", got)
	}
	if _, err := parse(t, append(base, "--engine-slot-share", "-1")...); err == nil {
		t.Error("--engine-slot-share -1 parsed")
	}
}

// parseWithEnv sets env for the test, then parses args, failing the test on an error.
func parseWithEnv(t *testing.T, env map[string]string, args ...string) *cli {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	c, err := parse(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

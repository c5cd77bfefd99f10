package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/overhead"
)

func TestListScenarios(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := listScenarios(&b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != 19 || !strings.Contains(b.String(), "demo ") {
		t.Errorf("%d lines:\n%s", n, b.String())
	}
}

func TestLoadScenarioErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nmodel: m\ncolour: blue\nrequest_count: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadScenario(bad)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `unknown field "colour"`) {
		t.Errorf("error %q", err)
	}
	if _, err := loadScenario("demo"); err != nil {
		t.Errorf("bundled demo: %v", err)
	}
	if _, err := loadScenario("no-such-scenario"); err == nil {
		t.Error("missing scenario accepted")
	}
}

// The overhead report states the A/A control's deviation and warns when it is large.
func TestWriteOverheadReportsTheNoiseFloor(t *testing.T) {
	t.Parallel()
	us := time.Microsecond
	// path returns 101 sorted samples: p50 at index 50, p99 at index 99.
	path := func(p50, p99 time.Duration) []time.Duration {
		s := make([]time.Duration, 101)
		for i := range s {
			s[i] = p50
			if i >= 99 {
				s[i] = p99
			}
		}
		return s
	}
	res := func(control time.Duration) *overhead.Result {
		r := &overhead.Result{}
		for p := range overhead.NumPaths {
			r.Samples[p] = path(100*us, 200*us)
		}
		r.Samples[overhead.ProxyPylon] = path(200*us, 300*us)
		r.Samples[overhead.GatewayPylon] = path(210*us, 310*us)
		r.Samples[overhead.ControlPylon] = path(200*us, control)
		return r
	}
	var quiet, noisy bytes.Buffer
	if err := writeOverhead(&quiet, res(305*us)); err != nil {
		t.Fatal(err)
	}
	if err := writeOverhead(&noisy, res(330*us)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(quiet.String(), "+0 % at p50 and +5 % at p99") || strings.Contains(quiet.String(), "not conclusive") {
		t.Errorf("quiet run:\n%s", quiet.String())
	}
	if !strings.Contains(noisy.String(), "+30 % at p99") || !strings.Contains(noisy.String(), "within 30 % of the budget is not conclusive") {
		t.Errorf("noisy run:\n%s", noisy.String())
	}
}

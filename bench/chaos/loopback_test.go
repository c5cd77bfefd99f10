package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/chaos"
	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func TestMain(m *testing.M) { mocktest.Main(m) }

// TestShortSuiteLoopback runs the --short suite end to end against the real binaries. It
// checks that the suite itself works — every short scenario ran on its fleet, sent its
// load and evaluated its budgets, and every process it started is gone — not that the
// fleet meets the budgets: that is what the suite reports.
func TestShortSuiteLoopback(t *testing.T) {
	bins := fleet.Binaries{
		Engine:  mocktest.Binary(t, "../../cmd/engine"),
		Pylon:   mocktest.Binary(t, "../../cmd/pylon"),
		Gateway: mocktest.Binary(t, "../../cmd/gateway"),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := chaos.Run(ctx, chaos.Options{Bin: bins, Short: true, LogDir: t.TempDir(), Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, s := range chaos.Scenarios() {
		if s.Short {
			want = append(want, s.Name)
		}
	}
	got := make([]string, 0, len(rep.Results))
	for i := range rep.Results {
		got = append(got, rep.Results[i].Name)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("ran %v, want the short scenarios %v", got, want)
	}
	for i := range rep.Results {
		r := &rep.Results[i]
		if r.Err != nil {
			t.Errorf("%s did not run: %v\nprogress:\n%s", r.Name, r.Err, progress.String())
			continue
		}
		if r.Load.Sent == 0 {
			t.Errorf("%s sent no load", r.Name)
		}
		if len(r.Checks) == 0 {
			t.Errorf("%s checked no budget", r.Name)
		}
		for _, c := range r.Checks {
			if c.Budget == "" || c.Got == "" || c.Limit == "" {
				t.Errorf("%s: an incomplete check %+v", r.Name, c)
			}
		}
		if len(r.RSS) != len(chaos.ProcNames) {
			t.Errorf("%s: RSS of %d processes, want %d", r.Name, len(r.RSS), len(chaos.ProcNames))
		}
		for _, p := range r.RSS {
			if p.Before <= 0 {
				t.Errorf("%s: no RSS for %s at the start", r.Name, p.Name)
			}
		}
		if r.Name == "idle-bursts" && r.Load.Sent != 5*40 {
			t.Errorf("idle-bursts sent %d requests, want 5 bursts of 40", r.Load.Sent)
		}
		if r.Name == "pylon-rejoin" {
			for _, p := range r.RSS {
				if p.Name == chaos.PylonName(0) && !p.Restarted {
					t.Errorf("pylon-rejoin: pylon-0 not reported as restarted: %+v", p)
				}
			}
		}
	}
	if len(rep.PIDs) < len(want)*len(chaos.ProcNames) {
		t.Errorf("%d processes started for %d scenarios", len(rep.PIDs), len(want))
	}
	for _, pid := range rep.PIDs {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after the run (kill 0: %v)", pid, err)
		}
	}
	var table, md bytes.Buffer
	if err := chaos.WriteTable(&table, rep.Results); err != nil {
		t.Fatal(err)
	}
	if err := chaos.WriteMarkdown(&md, "bench chaos --short", rep.Results); err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if !strings.Contains(table.String(), name) || !strings.Contains(md.String(), "## "+name) {
			t.Errorf("%s missing from the table or the markdown", name)
		}
	}
	t.Logf("short suite in %v:\n%s", rep.Took.Round(time.Second), table.String())
}

package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/bench/runner"
	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/scenarios"
	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func TestMain(m *testing.M) { mocktest.Main(m) }

// bench run end to end with the real binaries (what make demo does, cut down): the demo
// scenario with 24 requests at a tenth of its delays, over two algorithms, each on its own
// fleet; every request succeeds, the report and charts are written, and no child outlives
// the run (goleak and the fleet's process groups).
func TestRunDemoEndToEnd(t *testing.T) {
	bins := fleet.Binaries{
		Engine: mocktest.Binary(t, "../../cmd/engine"), Pylon: mocktest.Binary(t, "../../cmd/pylon"),
		Gateway: mocktest.Binary(t, "../../cmd/gateway"),
	}
	data, err := scenarios.Read("demo")
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenario.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	s.RequestCount = 24
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := runner.Run(ctx, runner.Options{
		Scenario: s, Seed: s.Seed, TimeScale: 0.1, Algorithms: []string{"round-robin", "wait-and-widen-affinity"},
		OutDir: out, Bin: bins, ReadyTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if r.Summary.Requests != 24 || r.Summary.Successes != 24 {
			t.Errorf("%s: %d/%d requests succeeded, failures %+v", r.Summary.Algorithm, r.Summary.Successes, r.Summary.Requests, r.Summary.Failures)
		}
	}
	// The demo's expect checks are evaluated; those that need an algorithm left out of
	// this run (power-of-two in a ratio, every algorithm in a rank) are skipped.
	if len(rep.Expectations) == 0 {
		t.Error("no expect checks evaluated")
	}
	for _, o := range rep.Expectations {
		if (o.RatioTo == "power-of-two" || o.Op == "lowest" || o.Op == "highest") && o.Status != score.Skipped {
			t.Errorf("%s: %s, want skipped", o.Check, o.Status)
		}
	}
	paths, err := runner.Write(out, rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(paths, filepath.Join(out, "ttft-cdf.png")) {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
}

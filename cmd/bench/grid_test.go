package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/report"
	"github.com/switchyard/switchyard/bench/score"
)

// bench run --grid runs one variant of the named algorithm per grid point, named as
// bench simulate names them, without the scenario's expect checks; the best point is the
// one with the fewest failures, then the lowest mean TTFT.
func TestRunGridVariantsAndBest(t *testing.T) {
	s, err := loadScenario("demo")
	if err != nil {
		t.Fatal(err)
	}
	if err := gridScenario(s, []string{"wait-and-widen-affinity"}, []string{"cache_affinity_backend_selection_count=1,2", "session_affinity_ttl_ms=0,300000"}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(s.Algorithms))
	for _, a := range s.Algorithms {
		names = append(names, a.Name)
	}
	want := "cache_affinity_backend_selection_count=1,session_affinity_ttl_ms=0 cache_affinity_backend_selection_count=1,session_affinity_ttl_ms=300000 " +
		"cache_affinity_backend_selection_count=2,session_affinity_ttl_ms=0 cache_affinity_backend_selection_count=2,session_affinity_ttl_ms=300000"
	if got := strings.Join(names, " "); got != want || s.Expect != nil {
		t.Errorf("variants %q (expect %v), want %q and no expect checks", got, s.Expect, want)
	}
	for _, bad := range [][]string{nil, {"wait-and-widen-affinity", "power-of-two"}, {"nope"}} {
		s, _ := loadScenario("demo")
		if err := gridScenario(s, bad, []string{"cache_affinity_wait_ms=0,1"}); err == nil {
			t.Errorf("--algorithms %v: no error", bad)
		}
	}

	run := func(name string, failed int, avgMs int64) report.Run {
		var r report.Run
		r.Summary = score.Summary{Algorithm: name, Requests: 10, Successes: 10 - failed}
		r.Summary.TTFT.Avg = durationMs(avgMs)
		return r
	}
	var out bytes.Buffer
	printBestRun(&out, []report.Run{run("a", 1, 50), run("b", 0, 90), run("c", 0, 80)})
	if !strings.Contains(out.String(), "best (fewest failures, then lowest mean TTFT): c") {
		t.Errorf("best: %q, want c", out.String())
	}
}

func durationMs(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

package lb_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// firstRand always returns 0: no shuffling, the first of equals wins.
type firstRand struct{}

func (firstRand) IntN(int) int { return 0 }

func seeded() lb.Rand { return rand.New(rand.NewPCG(1, 2)) }

// newBalancer builds the balancer of e, failing the test on error.
func newBalancer(tb testing.TB, e lbconfig.Entry, rng lb.Rand) lb.Balancer {
	tb.Helper()
	b, err := lb.New(e, rng)
	if err != nil {
		tb.Fatalf("lb.New(%v): %v", e.Algorithm, err)
	}
	return b
}

// idle is a candidate with RTT rtt and a valid, fast throughput.
func idle(id string, rtt float64) lb.Candidate {
	return lb.Candidate{ClusterID: id, RTT: ms(rtt), Load: load.Load{InputTPS: 1e6, MaxEngineConcurrency: 10}, Backends: 1}
}

// full makes c's engine full (running == max concurrency).
func full(c lb.Candidate) lb.Candidate {
	c.Load.RunningRequests = c.Load.MaxEngineConcurrency
	if c.Load.MaxEngineConcurrency == 0 {
		c.Load.MaxEngineConcurrency, c.Load.RunningRequests = 1, 1
	}
	return c
}

func snap(cs ...lb.Candidate) *lb.Snapshot { return lb.NewSnapshot("", "model-a", cs) }

// waw is the default wait-and-widen entry with mod applied.
//
// The decision tests were written for exact comparisons: they pin a 1 ms tie band, so a
// candidate a few milliseconds faster still wins; the default bucket-wide band has its
// own test (TestNearTiesAreSpread).
func waw(mod func(*lbconfig.Entry)) lbconfig.Entry {
	e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
	e.TieTolerance = time.Millisecond
	if mod != nil {
		mod(&e)
	}
	return e
}

// expect compares a decision with the expected one; got's TTFT estimate
// and cached share are compared only when want sets them.
func expect(t *testing.T, what string, got, want lb.Decision) {
	t.Helper()
	if want.TTFT == 0 {
		got.TTFT = 0
	}
	if want.CachedShare == 0 {
		got.CachedShare = 0
	}
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

// keyWithGroup finds an affinity key whose group (in ring order) is want.
func keyWithGroup(t *testing.T, e lbconfig.Entry, s *lb.Snapshot, want ...int32) string {
	t.Helper()
	b := newBalancer(t, e, firstRand{})
	for i := range 100_000 {
		key := fmt.Sprintf("key-%d", i)
		g := lb.AffinityGroup(b, s, &lb.Request{AffinityKey: key})
		if fmt.Sprint(g) == fmt.Sprint(want) {
			return key
		}
	}
	t.Fatalf("no key with affinity group %v", want)
	return ""
}

// prio is one priority-map entry.
func prio(priority uint32, queueMs uint64) load.PriorityEstimate {
	return load.PriorityEstimate{Priority: priority, QueueMs: queueMs}
}

package dispatch_test

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// newCappedFixture is newFixture with an ejection cap.
func newCappedFixture(t *testing.T, maxEjectionPercent int) *fixture {
	t.Helper()
	f := &fixture{sys: actors.NewSystem(slog.New(slog.DiscardHandler)), obs: &countingObserver{}, seq: map[string]*atomic.Uint64{}}
	dir := dispatch.NewDirectory(f.sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: f.obs, Seed: 1, MaxEjectionPercent: maxEjectionPercent})
	f.pid = dir.Ensure(target)
	t.Cleanup(func() {
		dir.Stop()
		time.Sleep(time.Minute)
	})
	return f
}

// eject reports backend id (already known) ejected since at, or readmitted (at zero).
func (f *fixture) eject(id string, l load.Load, at time.Time) {
	f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
		ID: id, URL: "http://" + id, ClusterID: id, Active: true, RTT: time.Millisecond, HasRTT: true, Load: l,
		Seq: f.seq[id], UpdatedAt: time.Now(), Ejected: !at.IsZero(), EjectedAt: at,
	}})
}

func (f *fixture) grantedTo(t *testing.T, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		p := f.route(lbconfig.DefaultEntry(lbconfig.RoundRobin), 10, nil)
		out := <-p.Mailbox
		if out.Kind != dispatch.OutcomeGranted {
			got["rejected:"+out.Reason.String()]++
			continue
		}
		got[out.BackendID]++
		f.sys.Root.Send(f.pid, dispatch.Release{BackendID: out.BackendID, Seq: out.Seq})
	}
	return got
}

// An ejected backend is not a candidate; readmitted, it is one again. With every backend
// ejected (a cap of 100 %), the target answers like one with no routable backend.
func TestEjectedBackendIsNotACandidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newCappedFixture(t, 100)
		idle := load.Load{InputTPS: 1000, MaxEngineConcurrency: 8}
		f.backend("a", time.Millisecond, idle, 0)
		f.backend("b", time.Millisecond, idle, 0)
		if got := f.grantedTo(t, 4); got["a"] != 2 || got["b"] != 2 {
			t.Fatalf("before ejection: %v", got)
		}
		f.eject("a", idle, time.Now())
		if got := f.grantedTo(t, 4); got["b"] != 4 {
			t.Errorf("a ejected: %v, want all on b", got)
		}
		f.eject("b", idle, time.Now())
		if got := f.grantedTo(t, 2); got["rejected:routing_unavailable"] != 2 {
			t.Errorf("all ejected: %v, want routing_unavailable (503 no_eligible_backend)", got)
		}
		f.eject("a", idle, time.Time{})
		f.eject("b", idle, time.Time{})
		if got := f.grantedTo(t, 4); got["a"] != 2 || got["b"] != 2 {
			t.Errorf("readmitted: %v", got)
		}
	})
}

// The cap keeps at most MaxEjectionPercent of a target's backends out (at least one): the
// ones ejected first stay out, the later ones remain candidates.
func TestEjectionCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newCappedFixture(t, 50)
		idle := load.Load{InputTPS: 1000, MaxEngineConcurrency: 8}
		for _, id := range []string{"a", "b", "c", "d"} {
			f.backend(id, time.Millisecond, idle, 0)
		}
		t0 := time.Now()
		f.eject("c", idle, t0)
		f.eject("a", idle, t0.Add(time.Millisecond))
		f.eject("d", idle, t0.Add(2*time.Millisecond)) // over the cap of 2 of 4
		got := f.grantedTo(t, 8)
		if got["a"] != 0 || got["c"] != 0 || got["b"] != 4 || got["d"] != 4 {
			t.Errorf("with a, c, d ejected and a cap of 2: %v, want b and d only", got)
		}
		st := f.state(t)
		if len(st.Ejected) != 2 || st.Ejected[0] != "a" || st.Ejected[1] != "c" || len(st.EjectedOverCap) != 1 || st.EjectedOverCap[0] != "d" {
			t.Errorf("state: ejected %v, over cap %v", st.Ejected, st.EjectedOverCap)
		}
	})
	// One backend: the cap still lets it be ejected (at least one).
	synctest.Test(t, func(t *testing.T) {
		f := newCappedFixture(t, 10)
		idle := load.Load{InputTPS: 1000}
		f.backend("solo", time.Millisecond, idle, 0)
		f.eject("solo", idle, time.Now())
		if got := f.grantedTo(t, 1); got["rejected:routing_unavailable"] != 1 {
			t.Errorf("single ejected backend: %v", got)
		}
	})
}

func (f *fixture) state(t *testing.T) *dispatch.State {
	t.Helper()
	v, err := f.sys.Root.RequestFuture(f.pid, dispatch.StateRequestForTest(), time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v.(*dispatch.State)
}

// A backend without a measured input throughput (new, or restarted: it reports 0) is
// estimated at the median of its target's backends, not as never finishing a prefill:
// power-of-n with the ttft comparator gives it its share at once.
func TestUnknownThroughputIsTheFleetMedian(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.backend("a", time.Millisecond, load.Load{InputTPS: 1000}, 0)
		f.backend("b", time.Millisecond, load.Load{InputTPS: 3000}, 0)
		f.backend("restarted", time.Millisecond, load.Load{}, 0)
		e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
		got := map[string]int{}
		var ttft time.Duration
		for range 300 {
			p := f.route(e, 1000, nil)
			out := <-p.Mailbox
			if out.Kind != dispatch.OutcomeGranted {
				t.Fatalf("outcome %+v", out)
			}
			got[out.BackendID]++
			if out.BackendID == "restarted" {
				ttft = out.TTFT
				if !out.HasTTFT || out.InputTPS != 2000 {
					t.Fatalf("restarted backend's grant: TTFT %v (%v), input tps %v; want the median 2000", out.TTFT, out.HasTTFT, out.InputTPS)
				}
			}
			f.sys.Root.Send(f.pid, dispatch.Release{BackendID: out.BackendID, Seq: out.Seq})
		}
		if got["restarted"] < 50 {
			t.Errorf("grants %v: the restarted backend got %d of 300", got, got["restarted"])
		}
		// 1 ms RTT + 1000 tokens at 2000 tokens/s.
		if want := 501 * time.Millisecond; ttft != want {
			t.Errorf("restarted backend's TTFT estimate %v, want %v", ttft, want)
		}
	})
}

// With no other backend to take a median from, a backend that loses its throughput keeps
// the last one it reported.
func TestUnknownThroughputFallsBackToTheLastReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.backend("solo", 0, load.Load{InputTPS: 500}, 0)
		f.backend("solo", 0, load.Load{}, 0)
		p := f.route(lbconfig.DefaultEntry(lbconfig.PowerOfN), 100, nil)
		out := <-p.Mailbox
		if out.Kind != dispatch.OutcomeGranted || !out.HasTTFT || out.TTFT != 200*time.Millisecond {
			t.Errorf("outcome %+v, want a grant with a 200 ms TTFT (100 tokens at 500/s)", out)
		}
	})
}

// Grants carry the backend's own TTFT estimate: RTT + queue + this request's prefill.
func TestGrantCarriesTheTTFTEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.backend("b", 20*time.Millisecond, load.Load{InputTPS: 1000, QueuedInputTokens: 300, QueueEstimates: []load.PriorityEstimate{{Priority: 0, QueueMs: 300}}}, 0)
		p := f.route(lbconfig.DefaultEntry(lbconfig.PowerOfN), 200, nil)
		out := <-p.Mailbox
		if want := 20*time.Millisecond + 300*time.Millisecond + 200*time.Millisecond; !out.HasTTFT || out.TTFT != want {
			t.Errorf("TTFT %v (%v), want %v", out.TTFT, out.HasTTFT, want)
		}
		f.backend("b", 20*time.Millisecond, load.Load{QueuedInputTokens: 300}, 0) // no throughput anywhere
		p = f.route(lbconfig.DefaultEntry(lbconfig.PowerOfN), 200, nil)
		if out := <-p.Mailbox; out.Kind == dispatch.OutcomeGranted && out.HasTTFT && out.TTFT != 500*time.Millisecond+20*time.Millisecond {
			t.Errorf("after losing its throughput: TTFT %v", out.TTFT)
		}
	})
}

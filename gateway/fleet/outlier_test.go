package fleet_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// outlierRig is a rig with the default ejection policy; ejections lists the ejections'
// reasons in order.
type outlierRig struct {
	*rig
	mu         sync.Mutex
	ejections  []fleet.Failure
	ejectedIDs []string
}

func newOutlierRig(t *testing.T) *outlierRig {
	t.Helper()
	r := &outlierRig{}
	sys, dir, f := fleet.NewTestFleetWith(t, fleet.Deps{
		DefaultHeartbeat: time.Second, MinExpiry: time.Millisecond,
		Outlier: fleet.Outlier{
			ConsecutiveFailures: 3, BaseEjection: time.Second, MaxEjection: 5 * time.Second, MaxEjectionPercent: 100,
		},
		OnEjected: func(id string, why fleet.Failure) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.ejections = append(r.ejections, why)
			r.ejectedIDs = append(r.ejectedIDs, id)
		},
	})
	r.rig = &rig{sys: sys, dir: dir, fleet: f}
	return r
}

func (r *outlierRig) health(t *testing.T) fleet.EjectionState {
	t.Helper()
	for _, s := range r.fleet.States() {
		if s.ID == "p1" {
			return s.Health
		}
	}
	t.Fatal("backend p1 unknown")
	return fleet.EjectionState{}
}

func (r *outlierRig) fail(b *fleet.Backend, why fleet.Failure, n int) {
	for range n {
		r.fleet.ReportFailure(b, why)
	}
	synctest.Wait()
}

// routable tells whether the scheduler of model m grants a request to a backend.
func (r *outlierRig) routable(t *testing.T) bool {
	t.Helper()
	pid := r.dir.Lookup(target("m"))
	p := dispatch.NewPending(time.Now())
	e := lbconfig.DefaultEntry(lbconfig.RoundRobin)
	p.Entry = &e
	r.sys.Root.Send(pid, dispatch.Route{P: p})
	out := <-p.Mailbox
	if out.Kind == dispatch.OutcomeGranted {
		r.sys.Root.Send(pid, dispatch.Release{BackendID: out.BackendID, Seq: out.Seq})
	}
	return out.Kind == dispatch.OutcomeGranted
}

// Three failures in a row eject a backend for 1 s; back on probation, its next failure
// ejects it again for twice as long (2 s, 4 s, then the 5 s cap); a successful request
// resets both the count and the backoff. The scheduler leaves it out while ejected.
func TestEjectionBackoffGrowsAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newOutlierRig(t)
		r.register(t, registration("p1", 60_000, "m"))
		r.fleet.ReportRTT("p1", time.Millisecond)
		synctest.Wait()
		b := r.fleet.Get("p1")
		if !r.routable(t) {
			t.Fatal("not routable before any failure")
		}
		r.fail(b, fleet.FailConnect, 2)
		if h := r.health(t); h.Ejected || h.ConsecutiveFailures != 2 || !r.routable(t) {
			t.Fatalf("after 2 failures: %+v", h)
		}
		r.fail(b, fleet.FailEngineUnreachable, 1)
		start := time.Now()
		h := r.health(t)
		if !h.Ejected || h.Reason != "engine_unreachable" || h.Level != 1 || !h.Until.Equal(start.Add(time.Second)) || r.fleet.Ejected() != 1 {
			t.Fatalf("after 3 failures: %+v, %d ejected", h, r.fleet.Ejected())
		}
		if r.routable(t) {
			t.Fatal("an ejected backend got a request")
		}
		for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
			time.Sleep(want - time.Millisecond)
			synctest.Wait()
			if h := r.health(t); !h.Ejected {
				t.Fatalf("ejection %d ended before %v: %+v", i+1, want, h)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if h := r.health(t); h.Ejected || !r.routable(t) {
				t.Fatalf("ejection %d still on after %v: %+v", i+1, want, h)
			}
			r.fail(b, fleet.FailFirstByteTimeout, 1) // on probation: one failure is enough
			if h := r.health(t); !h.Ejected || h.Level != i+2 {
				t.Fatalf("failure on probation after ejection %d: %+v", i+1, h)
			}
		}
		// Readmitted, a successful request resets the count and the backoff.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		r.fleet.ReportSuccess(b)
		synctest.Wait()
		if h := r.health(t); h.Ejected || h.ConsecutiveFailures != 0 || h.Level != 0 || h.Ejections != 6 {
			t.Fatalf("after a success: %+v", h)
		}
		r.fail(b, fleet.FailConnect, 3)
		if h := r.health(t); !h.Ejected || h.Level != 1 || !h.Until.Equal(time.Now().Add(time.Second)) {
			t.Fatalf("after a success and 3 new failures: %+v, want a 1 s ejection", h)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.ejections) != 7 || r.ejections[0] != fleet.FailEngineUnreachable || r.ejections[1] != fleet.FailFirstByteTimeout {
			t.Errorf("ejection callbacks: %v", r.ejections)
		}
	})
}

// Failed health probes eject a backend too; a probe that passes again ends that ejection
// at once, while one still failing when the ejection ends extends it.
func TestProbesEjectAndReadmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newOutlierRig(t)
		r.register(t, registration("p1", 60_000, "m"))
		r.fleet.ReportRTT("p1", time.Millisecond)
		synctest.Wait()
		b := r.fleet.Get("p1")
		r.fail(b, fleet.FailProbe, 3)
		if h := r.health(t); !h.Ejected || h.Reason != "health_probe_failed" {
			t.Fatalf("after 3 failed probes: %+v", h)
		}
		time.Sleep(time.Second) // the last probe still failed: ejected again, for 2 s
		synctest.Wait()
		if h := r.health(t); !h.Ejected || h.Level != 2 || r.fleet.Ejected() != 1 {
			t.Fatalf("at the end of the first ejection with probes failing: %+v (%d ejected)", h, r.fleet.Ejected())
		}
		time.Sleep(500 * time.Millisecond)
		r.fleet.ReportRTT("p1", time.Millisecond) // a probe passes
		synctest.Wait()
		if h := r.health(t); h.Ejected || !r.routable(t) || r.fleet.Ejected() != 0 {
			t.Fatalf("after a passing probe: %+v", h)
		}
		// A backend ejected for timeouts is not readmitted by a passing probe: its probes
		// never saw the problem.
		r.fail(b, fleet.FailFirstByteTimeout, 1)
		r.fleet.ReportRTT("p1", time.Millisecond)
		synctest.Wait()
		if h := r.health(t); !h.Ejected || h.Reason != "first_byte_timeout" {
			t.Fatalf("ejected for a timeout, then a passing probe: %+v", h)
		}
	})
}

// An ejected backend that expires or deregisters leaves the ejected count.
func TestEjectedBackendLeaving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newOutlierRig(t)
		r.register(t, registration("p1", 60_000, "m"))
		r.fail(r.fleet.Get("p1"), fleet.FailConnect, 3)
		if r.fleet.Ejected() != 1 {
			t.Fatalf("%d ejected, want 1", r.fleet.Ejected())
		}
		r.fleet.Deregister("p1")
		synctest.Wait()
		if r.fleet.Ejected() != 0 {
			t.Errorf("%d ejected after deregistration, want 0", r.fleet.Ejected())
		}
	})
}

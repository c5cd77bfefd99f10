package fleet_test

import (
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/gateway/lbconfig"
	"github.com/switchyard/switchyard/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is a fleet and its directory in their own actor system, without probes.
type rig struct {
	sys   *actor.ActorSystem
	dir   *dispatch.Directory
	fleet *fleet.Fleet
}

// newRig returns a rig stopped when the test ends. Backends expire after 3 heartbeats
// (no minimum) and targets are collected DefaultCollectGrace after their last backend left.
func newRig(t *testing.T) *rig {
	t.Helper()
	sys, dir, f := fleet.NewTestFleet(t)
	return &rig{sys: sys, dir: dir, fleet: f}
}

// registration of backend id listing models, with heartbeat hbMs.
func registration(id string, hbMs uint64, models ...string) wire.Registration {
	r := wire.Registration{ID: id, URL: "http://127.0.0.1:18080", ClusterID: id, HeartbeatMs: hbMs, Models: make(map[string]wire.Model, len(models))}
	for _, m := range models {
		r.Models[m] = wire.Model{Status: wire.StatusActive, Generation: 1, Stats: wire.Stats{LastMeanInputTPS: 1000, MaxEngineConcurrency: 4}}
	}
	return r
}

func (r *rig) register(t *testing.T, reg wire.Registration) {
	t.Helper()
	if err := r.fleet.Register(reg); err != nil {
		t.Fatalf("register %s: %v", reg.ID, err)
	}
	synctest.Wait()
}

func target(model string) dispatch.Target { return dispatch.Target{Model: model} }

// A backend's targets are collected a grace after it expires (3 missed heartbeats), not
// before; a target another backend still lists stays.
func TestTargetsCollectedAfterBackendExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.register(t, registration("p1", 100, "a", "shared"))
		r.register(t, registration("p2", 60_000, "shared"))
		if n := r.dir.Len(); n != 2 {
			t.Fatalf("%d targets, want 2", n)
		}
		time.Sleep(300*time.Millisecond + dispatch.DefaultCollectGrace - time.Millisecond)
		synctest.Wait()
		if r.fleet.Get("p1") != nil {
			t.Fatal("p1 did not expire after 3 missed heartbeats")
		}
		if r.dir.Lookup(target("a")) == nil {
			t.Fatal("target a collected before the grace")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if r.dir.Lookup(target("a")) != nil || r.dir.Lookup(target("shared")) == nil || r.dir.Len() != 1 {
			t.Fatalf("after the grace: a %v, shared %v, %d targets; want only shared", r.dir.Lookup(target("a")), r.dir.Lookup(target("shared")), r.dir.Len())
		}
	})
}

// A model a registration no longer lists, and every model of a deregistered backend, are
// collected after the grace.
func TestTargetsCollectedAfterModelDroppedOrDeregistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.register(t, registration("p1", 60_000, "a", "b"))
		r.register(t, registration("p1", 60_000, "a"))
		time.Sleep(dispatch.DefaultCollectGrace)
		synctest.Wait()
		if r.dir.Lookup(target("b")) != nil || r.dir.Lookup(target("a")) == nil {
			t.Fatalf("after dropping b: a %v, b %v; want a only", r.dir.Lookup(target("a")), r.dir.Lookup(target("b")))
		}
		if !r.fleet.Deregister("p1") {
			t.Fatal("p1 unknown")
		}
		synctest.Wait()
		time.Sleep(dispatch.DefaultCollectGrace)
		synctest.Wait()
		if n := r.dir.Len(); n != 0 {
			t.Fatalf("%d targets a grace after the deregistration, want 0", n)
		}
	})
}

// A backend that registers again within the grace keeps its targets' schedulers (same
// pid), and the target routes to it.
func TestTargetKeptWhenBackendReturnsWithinGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.register(t, registration("p1", 100, "m"))
		pid := r.dir.Lookup(target("m"))
		time.Sleep(300 * time.Millisecond)
		synctest.Wait()
		if r.fleet.Get("p1") != nil {
			t.Fatal("p1 did not expire")
		}
		time.Sleep(dispatch.DefaultCollectGrace - time.Second)
		r.register(t, registration("p1", 60_000, "m"))
		r.fleet.ReportRTT("p1", time.Millisecond)
		time.Sleep(2 * time.Minute) // well past the first grace, within the 3-minute expiry
		synctest.Wait()
		if got := r.dir.Lookup(target("m")); got != pid {
			t.Fatalf("scheduler %v, want the original %v kept", got, pid)
		}
		p := dispatch.NewPending(time.Now())
		e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
		p.Entry = &e
		r.sys.Root.Send(pid, dispatch.Route{P: p})
		if out := <-p.Mailbox; out.Kind != dispatch.OutcomeGranted || out.BackendID != "p1" {
			t.Fatalf("routing to the returned backend: %+v", out)
		}
	})
}

// A request parked in a target is answered (404, no candidates) the moment its only
// backend expires, not when its wait runs out; the target goes a grace later.
func TestParkedRequestAnsweredWhenBackendExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		reg := registration("p1", 1000, "m")
		m := reg.Models["m"]
		m.Stats.NumRunningQueries = m.Stats.MaxEngineConcurrency // full
		reg.Models["m"] = m
		r.register(t, reg)
		r.fleet.ReportRTT("p1", time.Millisecond)
		synctest.Wait()
		start := time.Now()
		p := dispatch.NewPending(start)
		e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
		p.Entry, p.MaxWait, p.HasMaxWait = &e, time.Minute, true
		r.sys.Root.Send(r.dir.Lookup(target("m")), dispatch.Route{P: p})
		out := <-p.Mailbox
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("answered after %v, want 3s (the expiry)", got)
		}
		if out.Kind != dispatch.OutcomeRejected || out.Reason != dispatch.ReasonNoCandidates {
			t.Errorf("outcome %+v, want 404 no_eligible_candidates", out)
		}
		time.Sleep(dispatch.DefaultCollectGrace)
		synctest.Wait()
		if r.dir.Len() != 0 {
			t.Error("the target outlived its grace")
		}
	})
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A flood of registrations naming many models each (floodBackends × 250 routing targets)
// leaves nothing behind once the backends expire and the grace passes: no target, and the
// heap back near where it started. What stays is protoactor's process registry, sized
// for the most actors it ever held (Go maps keep their buckets): about 15 MB after
// 200 000 targets, reused by the next flood.
func TestFloodOfTargetsIsCollected(t *testing.T) {
	const backends, models = floodBackends, 250
	if testing.Short() {
		t.Skip("a flood of targets")
	}
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		base := heapAlloc()
		names := make([]string, models)
		for i := range backends {
			id := "flood-" + strconv.Itoa(i)
			for j := range names {
				names[j] = id + "-model-" + strconv.Itoa(j)
			}
			if err := r.fleet.Register(registration(id, 1000, names...)); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n := r.dir.Len(); n != backends*models {
			t.Fatalf("%d targets, want %d", n, backends*models)
		}
		peak := heapAlloc()
		time.Sleep(3*time.Second + dispatch.DefaultCollectGrace) // expiry, then the grace
		synctest.Wait()
		if n := r.dir.Len(); n != 0 {
			t.Fatalf("%d targets left after expiry and the grace", n)
		}
		if st := r.dir.States(); len(st) != 0 {
			t.Fatalf("States lists %d targets", len(st))
		}
		after := heapAlloc()
		bound := base + max(20<<20, base/5)
		t.Logf("heap: %.1f MB at the start, %.1f MB with %d targets, %.1f MB after the collection (bound %.1f MB)",
			mb(base), mb(peak), backends*models, mb(after), mb(bound))
		if after > bound {
			t.Errorf("heap %.1f MB after the collection, over the bound %.1f MB (start %.1f MB)", mb(after), mb(bound), mb(base))
		}
	})
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

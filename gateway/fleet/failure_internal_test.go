package fleet

import (
	"log/slog"
	"net/url"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
	"github.com/switchyard/switchyard/internal/wire"
)

// NewTestFleet (for this package's tests, internal and external) returns a fleet and its
// directory in their own actor system, without probes, stopped when the test ends (call it
// inside a synctest bubble). Backends expire after 3 heartbeats (no minimum).
func NewTestFleet(t *testing.T) (*actor.ActorSystem, *dispatch.Directory, *Fleet) {
	t.Helper()
	return NewTestFleetWith(t, Deps{DefaultHeartbeat: time.Second, MinExpiry: time.Millisecond})
}

// NewTestFleetWith is NewTestFleet with deps (probes, health policy, callbacks): its
// clock, logger, actor system, directory and clients are filled in, and the directory
// caps ejection at deps.Outlier.MaxEjectionPercent.
func NewTestFleetWith(t *testing.T, deps Deps) (*actor.ActorSystem, *dispatch.Directory, *Fleet) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	sys := actors.NewSystem(logger)
	dir := dispatch.NewDirectory(sys, dispatch.Deps{Now: time.Now, Logger: logger, Observer: quietObserver{}, Seed: 1, MaxEjectionPercent: deps.Outlier.MaxEjectionPercent})
	deps.Now, deps.Logger, deps.System, deps.Schedulers = time.Now, logger, sys, dir
	deps.NewClient = func(u *url.URL) *fasthttp.HostClient { return &fasthttp.HostClient{Addr: u.Host} }
	f := New(deps)
	t.Cleanup(func() {
		f.Stop()
		dir.Stop()
		time.Sleep(time.Minute) // let protoactor's throttle goroutines finish (virtual time)
	})
	return sys, dir, f
}

type quietObserver struct{}

func (quietObserver) Rejected(dispatch.Target, dispatch.Reason) {}
func (quietObserver) Parked(dispatch.Target, int)               {}

// A backend actor that panics takes its backend out of the fleet at once (its scheduler
// stops routing to it) and stops; the pylon's next registration brings the backend back
// with a fresh actor, routed again.
func TestFailedBackendActorLeavesUntilItRegistersAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys, dir, f := NewTestFleet(t)
		reg := wire.Registration{ID: "p1", URL: "http://127.0.0.1:18080", ClusterID: "c1", HeartbeatMs: 60_000, Models: map[string]wire.Model{
			"a": {Status: wire.StatusActive, Generation: 1, Stats: wire.Stats{LastMeanInputTPS: 1000, MaxEngineConcurrency: 4}},
		}}
		register := func() {
			if err := f.Register(reg); err != nil {
				t.Fatal(err)
			}
			f.ReportRTT("p1", time.Millisecond)
			synctest.Wait()
		}
		register()
		pid := dir.Lookup(dispatch.Target{Model: "a"})
		e := lbconfig.DefaultEntry(lbconfig.RoundRobin)
		route := func() dispatch.Outcome {
			p := dispatch.NewPending(time.Now())
			p.Entry = &e
			sys.Root.Send(pid, dispatch.Route{P: p})
			return <-p.Mailbox
		}
		if out := route(); out.Kind != dispatch.OutcomeGranted || out.BackendID != "p1" {
			t.Fatalf("before the failure: %+v, want granted to p1", out)
		}
		b := f.Get("p1")
		sys.Root.Send(b.pid, (*loadReported)(nil)) // dereferenced: the actor panics
		synctest.Wait()
		if f.Get("p1") != nil {
			t.Error("the failed backend is still in the fleet")
		}
		if out := route(); out.Kind != dispatch.OutcomeRejected || out.Reason != dispatch.ReasonNoCandidates {
			t.Errorf("after the failure: %+v, want rejected no_eligible_candidates", out)
		}
		if _, ok := sys.ProcessRegistry.Get(b.pid); ok {
			t.Error("the failed backend actor did not stop")
		}
		register() // the pylon's next heartbeat
		if nb := f.Get("p1"); nb == nil || nb == b {
			t.Fatalf("after registering again: %v, want a new backend", nb)
		}
		if out := route(); out.Kind != dispatch.OutcomeGranted || out.BackendID != "p1" {
			t.Errorf("after registering again: %+v, want granted to p1", out)
		}
	})
}

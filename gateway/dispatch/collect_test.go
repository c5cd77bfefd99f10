package dispatch_test

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
)

// newDirectory returns a directory in its own actor system, stopped when the test ends.
func newDirectory(t *testing.T, grace time.Duration) (*actor.ActorSystem, *dispatch.Directory, *countingObserver) {
	t.Helper()
	sys := actors.NewSystem(slog.New(slog.DiscardHandler))
	obs := &countingObserver{}
	dir := dispatch.NewDirectory(sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: obs, Seed: 1, CollectGrace: grace})
	t.Cleanup(func() {
		dir.Stop()
		time.Sleep(time.Minute) // let protoactor's throttle goroutines finish (virtual time)
	})
	return sys, dir, obs
}

func view(id string, l load.Load) *dispatch.BackendChanged {
	return &dispatch.BackendChanged{View: dispatch.BackendView{
		ID: id, URL: "http://" + id, ClusterID: id, Active: true, RTT: time.Millisecond, HasRTT: true, Load: l,
		Seq: &atomic.Uint64{}, UpdatedAt: time.Now(),
	}}
}

// route sends a request to pid and returns it (its answer comes on its mailbox).
func route(sys *actor.ActorSystem, pid *actor.PID, mod func(*dispatch.Pending)) *dispatch.Pending {
	p := dispatch.NewPending(time.Now())
	e := waw()
	p.Entry = &e
	p.Req.InputTokens = 10
	if mod != nil {
		mod(p)
	}
	sys.Root.Send(pid, dispatch.Route{P: p})
	return p
}

// answered returns p's answer if it has one now (after the bubble settled).
func answered(p *dispatch.Pending) (dispatch.Outcome, bool) {
	synctest.Wait()
	select {
	case out := <-p.Mailbox:
		return out, true
	default:
		return dispatch.Outcome{}, false
	}
}

var idle = load.Load{InputTPS: 1000, MaxEngineConcurrency: 4}

// A target whose last backend detached is collected exactly when the grace has passed:
// gone from Lookup, Len and States, its epoch moved, and a request still holding its pid
// is answered at once as for a target without backends (404; 503 after a failure).
func TestTargetCollectedAfterGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys, dir, _ := newDirectory(t, 0) // the default, 30 s
		tg := dispatch.Target{RoutingKey: "k", Model: "m"}
		pid := dir.Attach(tg)
		sys.Root.Send(pid, view("b1", idle))
		if out, ok := answered(route(sys, pid, nil)); !ok || out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("with a backend: %+v (answered %v)", out, ok)
		}
		sys.Root.Send(pid, dispatch.BackendRemoved{ID: "b1"})
		dir.Detach(tg)
		epoch := dir.Epoch()

		time.Sleep(dispatch.DefaultCollectGrace - time.Millisecond)
		synctest.Wait()
		if dir.Lookup(tg) != pid || dir.Len() != 1 || len(dir.States()) != 1 {
			t.Fatalf("collected before the grace: lookup %v, len %d", dir.Lookup(tg), dir.Len())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if dir.Lookup(tg) != nil || dir.Len() != 0 || len(dir.States()) != 0 {
			t.Fatalf("not collected after the grace: lookup %v, len %d", dir.Lookup(tg), dir.Len())
		}
		if dir.Epoch() == epoch {
			t.Error("the epoch did not change with the collection")
		}
		// A request that looked the target up before the collection.
		if out, ok := answered(route(sys, pid, nil)); !ok || out.Kind != dispatch.OutcomeRejected || out.Reason != dispatch.ReasonNoCandidates {
			t.Errorf("a Route to the collected scheduler: %+v (answered %v), want 404 no_eligible_candidates at once", out, ok)
		}
		if out, ok := answered(route(sys, pid, func(p *dispatch.Pending) { p.Failures = 1 })); !ok || out.Reason != dispatch.ReasonNoEligibleBackend {
			t.Errorf("a retry to the collected scheduler: %+v (answered %v), want 503 no_eligible_backend", out, ok)
		}
		sys.Root.Send(pid, dispatch.Release{BackendID: "b1", Seq: 1}) // dropped quietly
		// The target comes back with a new scheduler.
		again := dir.Attach(tg)
		if again == pid || dir.Lookup(tg) != again {
			t.Fatalf("re-attached target: %v, want a new scheduler", again)
		}
		sys.Root.Send(again, view("b2", idle))
		if out, ok := answered(route(sys, again, nil)); !ok || out.BackendID != "b2" {
			t.Errorf("the new scheduler: %+v (answered %v)", out, ok)
		}
	})
}

// A target whose backend comes back within the grace keeps its scheduler (same pid, same
// state); it is collected only a full grace after its last backend left for good.
func TestTargetKeptWhenBackendReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys, dir, _ := newDirectory(t, 0)
		tg := dispatch.Target{Model: "m"}
		pid := dir.Attach(tg)
		sys.Root.Send(pid, view("b1", idle))
		sys.Root.Send(pid, dispatch.BackendRemoved{ID: "b1"})
		dir.Detach(tg)
		time.Sleep(20 * time.Second)
		if got := dir.Attach(tg); got != pid {
			t.Fatalf("re-attached within the grace: %v, want the same scheduler %v", got, pid)
		}
		sys.Root.Send(pid, view("b1", idle))
		time.Sleep(time.Hour)
		synctest.Wait()
		if dir.Lookup(tg) != pid {
			t.Fatal("a target with a backend was collected")
		}
		if out, ok := answered(route(sys, pid, nil)); !ok || out.BackendID != "b1" {
			t.Fatalf("after an hour with its backend: %+v (answered %v)", out, ok)
		}
		// Two backends: one leaving is not enough.
		if got := dir.Attach(tg); got != pid {
			t.Fatalf("second backend: %v", got)
		}
		sys.Root.Send(pid, view("b2", idle))
		sys.Root.Send(pid, dispatch.BackendRemoved{ID: "b1"})
		dir.Detach(tg)
		time.Sleep(time.Hour)
		synctest.Wait()
		if dir.Lookup(tg) != pid {
			t.Fatal("collected while one backend was still attached")
		}
		sys.Root.Send(pid, dispatch.BackendRemoved{ID: "b2"})
		dir.Detach(tg)
		// Detached, attached and detached again during the grace: the grace restarts.
		time.Sleep(10 * time.Second)
		dir.Attach(tg)
		dir.Detach(tg)
		time.Sleep(dispatch.DefaultCollectGrace - time.Millisecond)
		synctest.Wait()
		if dir.Lookup(tg) != pid {
			t.Fatal("collected before a full grace since the last detach")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if dir.Lookup(tg) != nil {
			t.Fatal("not collected a full grace after the last detach")
		}
	})
}

// Requests parked in a target when it is collected are answered at once with the answer
// of a target without backends, and the parked gauge returns to 0. (Through the fleet a
// target's last backend leaving already answers them; here the scheduler still holds a
// backend view when it is collected.)
func TestParkedRequestsAnsweredOnCollection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys, dir, obs := newDirectory(t, 5*time.Second)
		tg := dispatch.Target{Model: "m"}
		pid := dir.Attach(tg)
		sys.Root.Send(pid, view("full", load.Load{InputTPS: 1000, RunningRequests: 4, MaxEngineConcurrency: 4}))
		start := time.Now()
		wait := func(p *dispatch.Pending) { p.MaxWait, p.HasMaxWait = time.Minute, true }
		ps := []*dispatch.Pending{route(sys, pid, wait), route(sys, pid, wait), route(sys, pid, func(p *dispatch.Pending) { wait(p); p.Failures = 1 })}
		if _, ok := answered(ps[0]); ok {
			t.Fatal("a request to a full backend was answered instead of parked")
		}
		dir.Detach(tg)
		for i, p := range ps {
			out := <-p.Mailbox
			if got := time.Since(start); got != 5*time.Second {
				t.Errorf("request %d answered after %v, want 5s (the collection)", i, got)
			}
			want := dispatch.ReasonNoCandidates
			if p.Failures > 0 {
				want = dispatch.ReasonNoEligibleBackend
			}
			if out.Kind != dispatch.OutcomeRejected || out.Reason != want {
				t.Errorf("request %d: %+v, want rejected %d", i, out, want)
			}
		}
		synctest.Wait()
		obs.mu.Lock()
		parked := obs.parked
		obs.mu.Unlock()
		if parked != 0 || dir.Len() != 0 {
			t.Errorf("after the collection: parked gauge %d, %d targets", parked, dir.Len())
		}
	})
}

// A negative grace collects at once; Ensure alone never makes a target collectable, and a
// Detach without Attach changes nothing.
func TestCollectGraceEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, dir, _ := newDirectory(t, -1)
		a, b := dispatch.Target{Model: "a"}, dispatch.Target{Model: "b"}
		dir.Attach(a)
		dir.Detach(a)
		synctest.Wait()
		if dir.Lookup(a) != nil {
			t.Error("a negative grace did not collect at once")
		}
		pid := dir.Ensure(b)
		dir.Detach(b) // never attached: ignored
		time.Sleep(time.Hour)
		synctest.Wait()
		if dir.Lookup(b) != pid {
			t.Error("a target made by Ensure alone was collected")
		}
	})
}

// Requests racing the collection are all answered, whether they reach the scheduler
// before it stops, while it stops, or after: none waits.
func TestRoutesRacingTheCollectionAreAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys, dir, _ := newDirectory(t, time.Second)
		for round := range 20 {
			tg := dispatch.Target{Model: "m"}
			pid := dir.Attach(tg)
			dir.Detach(tg)
			time.Sleep(time.Second - time.Millisecond)
			var wg sync.WaitGroup
			var unanswered atomic.Int32
			for range 16 {
				wg.Go(func() {
					time.Sleep(time.Millisecond) // the collection fires at this very instant
					for range 20 {
						p := route(sys, pid, nil)
						select {
						case out := <-p.Mailbox:
							if out.Reason != dispatch.ReasonNoCandidates {
								t.Errorf("round %d: %+v, want 404", round, out)
							}
						case <-time.After(time.Second):
							unanswered.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := unanswered.Load(); n > 0 {
				t.Fatalf("round %d: %d requests never answered", round, n)
			}
			synctest.Wait()
			if dir.Lookup(tg) != nil {
				t.Fatalf("round %d: not collected", round)
			}
		}
	})
}

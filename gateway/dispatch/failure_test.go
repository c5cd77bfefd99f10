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
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// failRig is a directory whose restarted schedulers restore from views, the backends'
// current views as the test sets them (the fleet's backend actors in the gateway).
type failRig struct {
	sys   *actor.ActorSystem
	dir   *dispatch.Directory
	obs   *countingObserver
	seq   atomic.Uint64
	mu    sync.Mutex
	views []dispatch.BackendView
	asked int
}

func newFailRig(t *testing.T) *failRig {
	t.Helper()
	r := &failRig{sys: actors.NewSystem(slog.New(slog.DiscardHandler)), obs: &countingObserver{}}
	r.dir = dispatch.NewDirectory(r.sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: r.obs, Seed: 1})
	r.dir.RestoreFrom(func(dispatch.Target) []dispatch.BackendView {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.asked++
		return append([]dispatch.BackendView(nil), r.views...)
	})
	t.Cleanup(func() {
		r.dir.Stop()
		time.Sleep(time.Minute) // let protoactor's throttle goroutines finish (virtual time)
	})
	return r
}

// view sets backend "b"'s current view (running requests of 1 slot) and sends it to pid.
func (r *failRig) view(pid *actor.PID, running uint64) {
	v := dispatch.BackendView{
		ID: "b", URL: "http://b", ClusterID: "c", Active: true, RTT: time.Millisecond, HasRTT: true,
		Load: load.Load{InputTPS: 1000, RunningRequests: running, MaxEngineConcurrency: 1}, Seq: &r.seq, UpdatedAt: time.Now(),
	}
	r.mu.Lock()
	r.views = []dispatch.BackendView{v}
	r.mu.Unlock()
	r.sys.Root.Send(pid, &dispatch.BackendChanged{View: v})
}

func (r *failRig) route(pid *actor.PID, e *lbconfig.Entry, maxWait time.Duration) *dispatch.Pending {
	p := dispatch.NewPending(time.Now())
	p.Entry = e
	p.Req.InputTokens = 10
	p.MaxWait, p.HasMaxWait = maxWait, maxWait > 0
	r.sys.Root.Send(pid, dispatch.Route{P: p})
	return p
}

// poison routes a request without an algorithm definition: the scheduler dereferences it
// and panics (the stand-in for any bug in a scheduler's message handling).
func (r *failRig) poison(pid *actor.PID) *dispatch.Pending { return r.route(pid, nil, 0) }

// answer waits for p's answer and asserts it comes within limit (virtual time).
func answer(t *testing.T, p *dispatch.Pending, limit time.Duration, what string) dispatch.Outcome {
	t.Helper()
	start := time.Now()
	select {
	case out := <-p.Mailbox:
		if waited := time.Since(start); waited > limit {
			t.Errorf("%s: answered after %v, want within %v", what, waited, limit)
		}
		return out
	case <-time.After(time.Minute):
		t.Fatalf("%s: no answer within a minute", what)
		return dispatch.Outcome{}
	}
}

// A panic in a scheduler answers the request whose message panicked and every parked
// request at once (scheduler_failed); the restarted scheduler rebuilds its backends from
// their current views and routes the next request at once, with none of the failed
// instance's reservations.
func TestPanicAnswersAtOnceAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFailRig(t)
		pid := r.dir.Ensure(target)
		e := waw()
		r.view(pid, 1) // full: a request with x-max-wait-ms parks
		parked := r.route(pid, &e, 10*time.Second)
		synctest.Wait()
		if len(parked.Mailbox) != 0 {
			t.Fatalf("the request did not park: %+v", <-parked.Mailbox)
		}
		r.view(pid, 0) // the backend's current view: a free slot (not yet applied: see below)
		synctest.Wait()
		// The free slot granted the parked request; park another one behind a full view.
		if out := answer(t, parked, 0, "parked request"); out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("parked request: %+v, want granted", out)
		}
		r.view(pid, 1)
		parked = r.route(pid, &e, 10*time.Second)
		synctest.Wait()

		// The backend frees its slot, and the failing instance is never told: only the
		// restarted one can know it, from the views it restores. (Changed before the panic:
		// the restore may read the views as soon as the failure has been answered.)
		r.mu.Lock()
		r.views[0].Load.RunningRequests = 0
		r.mu.Unlock()
		panicked := time.Now()
		poisoned := r.poison(pid)
		for what, p := range map[string]*dispatch.Pending{"the panicking request": poisoned, "the parked request": parked} {
			if out := answer(t, p, time.Second, what); out.Kind != dispatch.OutcomeRejected || out.Reason != dispatch.ReasonSchedulerFailed {
				t.Errorf("%s: %+v, want rejected scheduler_failed", what, out)
			}
		}

		next := r.route(pid, &e, 0)
		if out := answer(t, next, time.Second, "the next request"); out.Kind != dispatch.OutcomeGranted || out.BackendID != "b" {
			t.Errorf("the next request: %+v, want granted to b", out)
		}
		if since := time.Since(panicked); since > time.Second {
			t.Errorf("routed %v after the panic, want within 1s", since)
		}
		synctest.Wait()
		r.obs.mu.Lock()
		rejected, parkedGauge := append([]string(nil), r.obs.rejected...), r.obs.parked
		r.obs.mu.Unlock()
		if len(rejected) != 2 || rejected[0] != "scheduler_failed" || rejected[1] != "scheduler_failed" || parkedGauge != 0 {
			t.Errorf("rejections %v, parked gauge %d; want two scheduler_failed and 0", rejected, parkedGauge)
		}
		st := state(t, r.sys, pid)
		if st.Backends != 1 || st.Parked != 0 || st.Reservations["b"] != 1 {
			t.Errorf("state after the restart %+v: want 1 backend, no parked request, only the new grant's reservation", st)
		}
		if r.dir.Lookup(target) == nil || r.dir.Len() != 1 {
			t.Errorf("the target left the directory")
		}
	})
}

// A scheduler that keeps failing (over protoactor's 10 restarts in 10 s) stops; its target
// is not left with a dead scheduler: Routes that reach it are answered scheduler_failed,
// and the next lookup respawns it under the same pid, restored from the backends' views.
func TestSchedulerStoppedForGoodIsRespawned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFailRig(t)
		pid := r.dir.Ensure(target)
		r.view(pid, 0)
		epoch := r.dir.Epoch()
		for i := range 11 {
			if out := answer(t, r.poison(pid), time.Second, "poisoned request"); out.Reason != dispatch.ReasonSchedulerFailed {
				t.Fatalf("poisoned request %d: %+v, want scheduler_failed", i, out)
			}
			synctest.Wait()
		}
		if r.dir.Epoch() == epoch {
			t.Fatalf("the scheduler did not stop after 11 failures in a row")
		}
		e := waw()
		if out := answer(t, r.route(pid, &e, 0), time.Second, "a request to the stopped scheduler"); out.Reason != dispatch.ReasonSchedulerFailed {
			t.Errorf("a request to the stopped scheduler: %+v, want scheduler_failed", out)
		}
		again := r.dir.Lookup(target)
		if again == nil || again.Id != pid.Id {
			t.Fatalf("lookup after the stop: %v, want the same pid %v respawned", again, pid)
		}
		// The old pid value reaches the new scheduler (the backend actors hold it).
		if out := answer(t, r.route(pid, &e, 0), time.Second, "a request after the respawn"); out.Kind != dispatch.OutcomeGranted || out.BackendID != "b" {
			t.Errorf("a request after the respawn: %+v, want granted to b", out)
		}
	})
}

func state(t *testing.T, sys *actor.ActorSystem, pid *actor.PID) *dispatch.State {
	t.Helper()
	v, err := sys.Root.RequestFuture(pid, dispatch.StateRequestForTest(), time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v.(*dispatch.State) //nolint:forcetypeassert // the state request's answer
}

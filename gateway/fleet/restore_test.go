package fleet_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// A scheduler restarted after a panic rebuilds its backends from the backend actors'
// current views: the next request is routed at once, to a backend this scheduler
// instance never got a change message from.
func TestRestartedSchedulerRestoresFromBackends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.register(t, registration("p1", 60_000, "a"))
		r.fleet.ReportRTT("p1", time.Millisecond)
		synctest.Wait()
		pid := r.dir.Lookup(target("a"))
		e := lbconfig.DefaultEntry(lbconfig.RoundRobin)
		route := func(entry *lbconfig.Entry) dispatch.Outcome {
			p := dispatch.NewPending(time.Now())
			p.Entry = entry
			r.sys.Root.Send(pid, dispatch.Route{P: p})
			select {
			case out := <-p.Mailbox:
				return out
			case <-time.After(time.Second):
				t.Fatal("no answer within 1s")
				return dispatch.Outcome{}
			}
		}
		if out := route(&e); out.Kind != dispatch.OutcomeGranted || out.BackendID != "p1" {
			t.Fatalf("before the panic: %+v, want granted to p1", out)
		}
		// A Route without an algorithm definition makes the scheduler panic.
		if out := route(nil); out.Reason != dispatch.ReasonSchedulerFailed {
			t.Fatalf("the panicking request: %+v, want scheduler_failed", out)
		}
		start := time.Now()
		if out := route(&e); out.Kind != dispatch.OutcomeGranted || out.BackendID != "p1" {
			t.Errorf("after the panic: %+v, want granted to p1", out)
		}
		if waited := time.Since(start); waited > time.Second {
			t.Errorf("routed %v after the panic, want within 1s", waited)
		}
	})
}

package dispatch_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// next routes one request with entry e and returns the backend it was granted.
func (f *fixture) next(t *testing.T, e lbconfig.Entry) string {
	t.Helper()
	out := <-f.route(e, 1, nil).Mailbox
	if out.Kind != dispatch.OutcomeGranted {
		t.Fatalf("outcome %+v, want granted", out)
	}
	return out.BackendID
}

func (f *fixture) threeClusters() {
	for _, id := range []string{"c0", "c1", "c2"} {
		f.backend(id, time.Millisecond, load.Load{InputTPS: 1000}, 1<<40)
	}
}

// Replacing a target's balancer state restarts round-robin at the first cluster.
func TestResetBalancersRestartsSequence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.threeClusters()
		rr := lbconfig.DefaultEntry(lbconfig.RoundRobin)
		if a, b := f.next(t, rr), f.next(t, rr); a != "c0" || b != "c1" {
			t.Fatalf("sequence %s, %s; want c0, c1", a, b)
		}
		f.sys.Root.Send(f.pid, dispatch.ResetBalancers{})
		if got := f.next(t, rr); got != "c0" {
			t.Errorf("after the reset: %s, want c0 (a fresh sequence)", got)
		}
		if n := f.state(t).Balancers; n != 1 {
			t.Errorf("%d balancer instances after the reset and one request, want 1", n)
		}
	})
}

// A target without candidates creates no balancer: neither without backends (404) nor
// with only unroutable ones (503).
func TestNoCandidatesCreatesNoBalancer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		rr := lbconfig.DefaultEntry(lbconfig.RoundRobin)
		if out := <-f.route(rr, 1, nil).Mailbox; out.Reason != dispatch.ReasonNoCandidates {
			t.Fatalf("no backends: %+v, want 404", out)
		}
		f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
			ID: "off", ClusterID: "off", Active: false, HasRTT: true, Load: load.Load{InputTPS: 1000}, UpdatedAt: time.Now(),
		}})
		if out := <-f.route(rr, 1, nil).Mailbox; out.Kind != dispatch.OutcomeRejected || out.Reason != dispatch.ReasonUnavailable {
			t.Fatalf("only an inactive backend: %+v, want 503", out)
		}
		st := f.state(t)
		if st.Backends != 1 || st.Candidates != 0 || st.Balancers != 0 {
			t.Errorf("state %+v: want 1 backend, 0 candidates and no balancer", st)
		}
		// Once a candidate appears, the first request creates the instance.
		f.backend("on", time.Millisecond, load.Load{InputTPS: 1000}, 0)
		if got := f.next(t, rr); got != "on" {
			t.Errorf("granted %s, want on", got)
		}
		if n := f.state(t).Balancers; n != 1 {
			t.Errorf("%d balancer instances, want 1", n)
		}
	})
}

// A round-robin override reached under several spellings (header aliases, a fresh Entry
// value per request) uses one stable sequence and exactly one instance per target.
func TestOverrideOneInstancePerTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.threeClusters()
		names := []string{"round-robin", "round_robin", "Round-Robin", "round-robin", "round_robin", "round-robin"}
		got := make([]string, 0, len(names))
		for i, name := range names {
			e := lbconfig.DefaultEntry(lbconfig.RoundRobin)
			e.Name = name
			got = append(got, f.next(t, e))
			if n := f.state(t).Balancers; n != 1 {
				t.Fatalf("after request %d: %d balancer instances, want exactly 1", i, n)
			}
		}
		want := []string{"c0", "c1", "c2", "c0", "c1", "c2"}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("sequence %v, want %v", got, want)
			}
		}
		// Another definition is another instance.
		f.next(t, lbconfig.DefaultEntry(lbconfig.Random))
		if n := f.state(t).Balancers; n != 2 {
			t.Errorf("%d balancer instances after a second definition, want 2", n)
		}
	})
}

// A reset with the new configuration keeps the instances of definitions it still has (a
// reloaded lb-config that did not change them loses no state) and drops the others and
// every expression's.
func TestResetBalancersKeepsUnchangedDefinitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.threeClusters()
		rr := lbconfig.DefaultEntry(lbconfig.RoundRobin)
		expr := rr
		expr.MaxInputWorkSeconds, expr.HasMaxInputWork, expr.FromExpression = 100, true, true
		f.next(t, rr)
		f.next(t, expr)
		keeps, err := lbconfig.Parse([]byte(`{"default":"power-of-n","models":{"m":"round-robin"}}`))
		if err != nil {
			t.Fatal(err)
		}
		f.sys.Root.Send(f.pid, dispatch.ResetBalancers{Config: keeps})
		if got := f.next(t, rr); got != "c1" {
			t.Errorf("a definition the new config still has restarted: %s, want c1", got)
		}
		if got := f.next(t, expr); got != "c0" {
			t.Errorf("an expression's balancer survived the reset: %s, want a fresh c0", got)
		}
		drops, err := lbconfig.Parse([]byte(`{"default":"power-of-n","models":{"m":"random"}}`))
		if err != nil {
			t.Fatal(err)
		}
		f.sys.Root.Send(f.pid, dispatch.ResetBalancers{Config: drops})
		if got := f.next(t, rr); got != "c0" {
			t.Errorf("a definition the new config dropped kept its state: %s, want a fresh c0", got)
		}
	})
}

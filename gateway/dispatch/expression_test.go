package dispatch_test

import (
	"testing"
	"testing/synctest"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// A target keeps the balancers of its two most recent routing expressions: a third
// distinct expression drops the least recent one, whose next request starts a fresh
// instance; the configured definitions' balancers are never dropped.
func TestExpressionBalancersBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.threeClusters()
		rr := lbconfig.DefaultEntry(lbconfig.RoundRobin)
		expr := func(n int) lbconfig.Entry {
			e := lbconfig.DefaultEntry(lbconfig.RoundRobin)
			e.MaxInputWorkSeconds, e.HasMaxInputWork, e.FromExpression = float64(100+n), true, true
			return e
		}
		f.next(t, rr)
		if got := f.next(t, expr(1)); got != "c0" {
			t.Fatalf("first expression started at %s", got)
		}
		if got := f.next(t, expr(1)); got != "c1" {
			t.Fatalf("the expression's balancer was not kept: %s, want c1", got)
		}
		f.next(t, expr(2))
		if n := f.state(t).Balancers; n != 3 {
			t.Errorf("%d balancers with one configured and two expressions, want 3", n)
		}
		f.next(t, expr(3)) // drops expr(1), the least recent
		if n := f.state(t).Balancers; n != dispatch.MaxExpressionBalancers+1 {
			t.Errorf("%d balancers after a third expression, want %d", n, dispatch.MaxExpressionBalancers+1)
		}
		if got := f.next(t, expr(1)); got != "c0" {
			t.Errorf("a dropped expression's balancer continued at %s, want a fresh c0", got)
		}
		if got := f.next(t, rr); got != "c1" {
			t.Errorf("the configured balancer was dropped: %s, want c1", got)
		}
	})
}

package gateway

import (
	"strconv"
	"testing"
	"time"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// The expression cache keeps a target's two most recent expressions, forgets them after
// 15 idle minutes or under a new configuration, and holds at most exprCacheTargets
// targets.
func TestExprCache(t *testing.T) {
	t.Parallel()
	var c exprCache
	cfg, now := lbconfig.Default(), time.Unix(1000, 0)
	k := exprKey{model: "m"}
	entry := func(n int) lbconfig.Entry {
		e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
		e.N = n
		return e
	}
	c.put(cfg, k, "a", entry(1), now)
	c.put(cfg, k, "b", entry(2), now)
	if e, ok := c.get(cfg, k, "a", now); !ok || e.N != 1 {
		t.Fatalf("a: %v %v", e.N, ok)
	}
	c.put(cfg, k, "c", entry(3), now) // a was used last: b goes
	if _, ok := c.get(cfg, k, "b", now); ok {
		t.Error("b kept beyond the two most recent")
	}
	if _, ok := c.get(cfg, k, "a", now); !ok {
		t.Error("a (recently used) dropped")
	}
	if _, ok := c.get(cfg, exprKey{routingKey: "r", model: "m"}, "a", now); ok {
		t.Error("another routing key shares the target's expressions")
	}
	if _, ok := c.get(lbconfig.Default(), k, "a", now); ok {
		t.Error("an expression resolved under another configuration was returned")
	}
	if _, ok := c.get(cfg, k, "a", now.Add(exprCacheIdle+time.Second)); ok {
		t.Error("kept after 15 idle minutes")
	}
	for i := range exprCacheTargets + 10 {
		c.put(cfg, exprKey{model: strconv.Itoa(i)}, "a", entry(1), now.Add(time.Duration(i)))
	}
	if n := c.len(); n > exprCacheTargets {
		t.Errorf("%d targets held, want at most %d", n, exprCacheTargets)
	}
	if _, ok := c.get(cfg, exprKey{model: strconv.Itoa(exprCacheTargets + 9)}, "a", now.Add(time.Hour/4)); !ok {
		t.Error("the most recent target was evicted")
	}
}

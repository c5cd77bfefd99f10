package gateway

import (
	"sync"
	"time"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Routing expressions (x-routing-method: <method>;<field>=<value>...) are parsed once per
// routing target and expression: each target (routing key × model) remembers the
// definitions of its exprPerTarget most recent expressions, compared byte for byte.
const (
	// mExpressions counts requests with a routing expression by algorithm and by whether
	// the parsed definition was remembered (cache="hit") or parsed now ("miss").
	mExpressions = "routing_expressions_total"
	// mExpressionEntries is the number of routing targets the expression cache holds.
	mExpressionEntries = "routing_expression_cache_entries"

	exprPerTarget = 2
	// exprCacheTargets bounds the targets the cache holds (least recently used dropped).
	exprCacheTargets = 16384
	// exprCacheIdle drops a target's expressions once it sent none for this long.
	exprCacheIdle = 15 * time.Minute
)

// exprKey is one routing target under one lb-config.
type exprKey struct {
	routingKey, model string
}

type exprDef struct {
	expr  string
	entry lbconfig.Entry
}

// exprSlot is one target's most recent expressions, most recent first.
type exprSlot struct {
	recent [exprPerTarget]exprDef
	n      int
	used   time.Time
}

// exprCache remembers parsed routing expressions; safe for concurrent use. The zero
// value is ready (the map is made on first use).
type exprCache struct {
	mu    sync.Mutex
	cfg   *lbconfig.Config // the configuration the entries were resolved under
	m     map[exprKey]*exprSlot
	gauge sync.Once
}

// get returns the definition of expr for the target, remembered under cfg.
func (c *exprCache) get(cfg *lbconfig.Config, k exprKey, expr string, now time.Time) (lbconfig.Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg != cfg {
		return lbconfig.Entry{}, false
	}
	s := c.m[k]
	if s == nil || now.Sub(s.used) > exprCacheIdle {
		return lbconfig.Entry{}, false
	}
	for i := range s.n {
		if s.recent[i].expr == expr {
			d := s.recent[i]
			copy(s.recent[1:i+1], s.recent[:i])
			s.recent[0], s.used = d, now
			return d.entry, true
		}
	}
	return lbconfig.Entry{}, false
}

// put remembers the definition of expr for the target (a new configuration forgets every
// earlier one).
func (c *exprCache) put(cfg *lbconfig.Config, k exprKey, expr string, e lbconfig.Entry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg != cfg || c.m == nil {
		c.cfg, c.m = cfg, map[exprKey]*exprSlot{}
	}
	s := c.m[k]
	if s == nil {
		if len(c.m) >= exprCacheTargets {
			c.evictLocked()
		}
		s = &exprSlot{}
		c.m[k] = s
	}
	if now.Sub(s.used) > exprCacheIdle {
		s.n = 0
	}
	copy(s.recent[1:], s.recent[:exprPerTarget-1])
	s.recent[0], s.used = exprDef{expr: expr, entry: e}, now
	s.n = min(s.n+1, exprPerTarget)
}

// evictLocked makes room when the cache is full: it drops a sixteenth of the targets in
// the map's (random) order, so a full cache costs O(1) per new target on average. (Idle
// targets are not looked for: they count as misses anyway.)
func (c *exprCache) evictLocked() {
	drop := max(len(c.m)/16, 1)
	for k := range c.m {
		if drop == 0 {
			return
		}
		delete(c.m, k)
		drop--
	}
}

func (c *exprCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// resolveEntry resolves the request's definition: cfg.Resolve, with routing expressions
// remembered per target and counted.
func (g *Gateway) resolveEntry(cfg *lbconfig.Config, rt *routing) (lbconfig.Entry, error) {
	if !rt.hasMethod || !lbconfig.IsExpression(rt.method) {
		return cfg.Resolve(rt.model, rt.method, rt.hasMethod) //nolint:wrapcheck // wrapped by the caller
	}
	now, k := g.deps.Now(), exprKey{routingKey: rt.routingKey, model: rt.model}
	if e, ok := g.exprs.get(cfg, k, rt.method, now); ok {
		g.countExpression(e, "hit")
		return e, nil
	}
	e, err := cfg.Resolve(rt.model, rt.method, true)
	if err != nil {
		return e, err //nolint:wrapcheck // wrapped by the caller
	}
	g.exprs.put(cfg, k, rt.method, e, now)
	g.countExpression(e, "miss")
	return e, nil
}

// countExpression counts one request routed by a routing expression.
func (g *Gateway) countExpression(e lbconfig.Entry, cache string) {
	g.exprs.gauge.Do(func() {
		g.metrics.set.GetOrCreateGauge(g.metrics.prefix+mExpressionEntries, func() float64 { return float64(g.exprs.len()) })
	})
	g.metrics.inc(mExpressions, "algorithm", e.Algorithm.String(), "cache", cache)
}

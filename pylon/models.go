package pylon

import (
	"slices"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/pylon/stats"
)

// lookup returns the served model named model (nil: not served). model may alias a
// request buffer: the map lookup does not keep it.
func (p *Pylon) lookup(model []byte) *modelEntry {
	return (*p.models.Load())[string(model)]
}

// setModels makes exactly names served: new models get a new generation, models no
// longer listed have their generation retired.
func (p *Pylon) setModels(names []string) {
	p.modelsMu.Lock()
	defer p.modelsMu.Unlock()
	old := *p.models.Load()
	next := make(map[string]*modelEntry, len(old)+len(names))
	for k, v := range old {
		next[k] = v
	}
	changed := false
	for _, name := range names {
		e, ok := next[name]
		if !ok {
			e = &modelEntry{name: name}
			e.metrics = newModelMetrics(p.metrics, name, func() *genSnapshot {
				if g := e.cur.Load(); g != nil {
					return g.snapshot(p.sys.Root)
				}
				return nil
			})
			next[name] = e
		}
		if e.cur.Load() == nil {
			e.cur.Store(p.spawnGeneration(name, nil))
			changed = true
			p.log.Info("model_generation_started", "model", name, "generation", e.cur.Load().gen)
		}
	}
	for name, e := range next {
		if g := e.cur.Load(); g != nil && !slices.Contains(names, name) {
			e.cur.Store(nil)
			p.sys.Root.Send(g.pid, &retire{})
			changed = true
			p.log.Info("model_generation_retired", "model", name, "generation", g.gen)
		}
	}
	p.models.Store(&next)
	if changed {
		p.structure.Add(1)
		p.publish()
	}
}

// spawnGeneration starts a new generation actor for model with a fresh aggregate; its
// first snapshot is published before the actor runs. prev, when not nil, is the
// generation it replaces: the new one starts from prev's engine sources and published
// input throughput (see genLife).
func (p *Pylon) spawnGeneration(model string, prev *generation) *generation {
	g := &generation{model: model, gen: p.nextGen.Add(1), done: make(chan struct{}), replies: p.replies}
	l := &genLife{
		g: g, adm: p.cfg.Admission, now: p.now, onChange: p.publish, log: p.log, fault: &p.genFault, replace: p.replaceLater,
		opts: stats.Options{FallbackConcurrency: p.cfg.MaxEngineConcurrency, InitialInputTPS: p.cfg.InitialInputTPS, PinInputTPS: p.cfg.PinInputTPS},
	}
	g.life = l
	if prev != nil {
		g.src = prev.sources()
		if !l.opts.PinInputTPS {
			var s genSnapshot
			if ok, _ := prev.published(&s); ok && load.ValidTPS(s.load.InputTPS) {
				l.opts.InitialInputTPS = s.load.InputTPS
			}
		}
	}
	g.pid = p.sys.Root.Spawn(l.props())
	return g
}

// replaceLater has old, which stopped for good after repeated failures, replaced on a
// goroutine of its own: it is called on old's mailbox run, which may be a goroutine that
// holds modelsMu (setModels sends to generations under it).
func (p *Pylon) replaceLater(old *generation) {
	p.replMu.Lock()
	defer p.replMu.Unlock()
	if p.gensStopped {
		return
	}
	p.replacing.Go(func() { p.replaceGeneration(old) })
}

// replaceGeneration puts a new generation in place of old unless old is no longer its
// model's current generation (retired meanwhile).
func (p *Pylon) replaceGeneration(old *generation) {
	p.modelsMu.Lock()
	defer p.modelsMu.Unlock()
	e := (*p.models.Load())[old.model]
	if e == nil || !e.cur.CompareAndSwap(old, nil) {
		return
	}
	g := p.spawnGeneration(old.model, old)
	e.cur.Store(g)
	p.log.Warn("model_generation_replaced", "model", old.model, "generation", g.gen, "failed_generation", old.gen)
	p.structure.Add(1)
	p.publish()
}

// stopGenerations stops every model generation actor (none is replaced afterwards).
func (p *Pylon) stopGenerations() {
	p.replMu.Lock()
	p.gensStopped = true
	p.replMu.Unlock()
	p.replacing.Wait() // a replacement under way finishes first, and is stopped below
	for _, e := range *p.models.Load() {
		if g := e.cur.Load(); g != nil {
			g.stopping.Store(true)
			_ = p.sys.Root.StopFuture(g.pid).Wait()
		}
	}
}

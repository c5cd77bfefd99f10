package pylon

import (
	"slices"

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
			e.cur.Store(p.spawnGeneration(name))
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
// first snapshot is published before the actor runs.
func (p *Pylon) spawnGeneration(model string) *generation {
	g := &generation{model: model, gen: p.nextGen.Add(1), done: make(chan struct{}), replies: p.replies}
	agg := stats.NewAggregate(model, g.gen, stats.Options{
		FallbackConcurrency: p.cfg.MaxEngineConcurrency, InitialInputTPS: p.cfg.InitialInputTPS, PinInputTPS: p.cfg.PinInputTPS,
	})
	a := &genActor{g: g, agg: agg, adm: p.cfg.Admission, now: p.now, onChange: p.publish}
	now := p.now()
	a.publish(now) // the first registration already carries the fallback concurrency
	g.pid = p.sys.Root.Spawn(genProps(a))
	return g
}

// stopGenerations stops every model generation actor.
func (p *Pylon) stopGenerations() {
	for _, e := range *p.models.Load() {
		if g := e.cur.Load(); g != nil {
			_ = p.sys.Root.StopFuture(g.pid).Wait()
		}
	}
}

// Package dispatch holds the gateway's scheduler actors: one per routing target, owning
// the candidate snapshot, routing reservations, balancer instances and parked requests,
// and running the routing loop of REFERENCE.md §1.14 with event-driven wake-ups.
package dispatch

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Directory finds (and on first registration spawns) the scheduler actor of each routing
// target. It is safe for concurrent use.
type Directory struct {
	sys  *actor.ActorSystem
	deps Deps
	mu   sync.RWMutex
	m    map[Target]*entry
}

type entry struct {
	pid *actor.PID
}

// NewDirectory returns an empty directory spawning schedulers in sys.
func NewDirectory(sys *actor.ActorSystem, deps Deps) *Directory {
	return &Directory{sys: sys, deps: deps, m: map[Target]*entry{}}
}

// Lookup returns the scheduler of t, or nil when t was never registered.
func (d *Directory) Lookup(t Target) *actor.PID {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if e, ok := d.m[t]; ok {
		return e.pid
	}
	return nil
}

// Ensure returns the scheduler of t, spawning it on first use.
func (d *Directory) Ensure(t Target) *actor.PID {
	if pid := d.Lookup(t); pid != nil {
		return pid
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.m[t]; ok {
		return e.pid
	}
	s := NewScheduler(t, d.deps)
	pid := d.sys.Root.Spawn(s.Props())
	d.m[t] = &entry{pid: pid}
	return pid
}

// States asks every scheduler for its state (debug only; one second timeout each).
func (d *Directory) States() []*State {
	d.mu.RLock()
	pids := make([]*actor.PID, 0, len(d.m))
	for _, e := range d.m {
		pids = append(pids, e.pid)
	}
	d.mu.RUnlock()
	out := make([]*State, 0, len(pids))
	for _, pid := range pids {
		if v, err := d.sys.Root.RequestFuture(pid, stateRequest{}, time.Second).Result(); err == nil {
			if st, ok := v.(*State); ok {
				out = append(out, st)
			}
		}
	}
	return out
}

// Stop stops every scheduler (parked requests are answered 503) and waits for them.
func (d *Directory) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for t, e := range d.m {
		_ = d.sys.Root.StopFuture(e.pid).Wait()
		delete(d.m, t)
	}
}

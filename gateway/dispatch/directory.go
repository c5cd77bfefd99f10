// Package dispatch holds the gateway's scheduler actors: one per routing target, owning
// the candidate snapshot, routing reservations, balancer instances and parked requests,
// and running the routing loop (input-work admission, then the balancer's decision: grant,
// park until a wake-up, or reject) with event-driven wake-ups.
package dispatch

import (
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// DefaultCollectGrace is how long a routing target whose last backend left keeps its
// scheduler (Deps.CollectGrace).
const DefaultCollectGrace = 30 * time.Second

// DefaultReleaseAfter is how many collected targets make the directory hand memory back to
// the operating system (Deps.ReleaseAfter).
const DefaultReleaseAfter = 10_000

// Directory finds (and on first registration spawns) the scheduler actor of each routing
// target. It is safe for concurrent use.
//
// Targets are collected: the backend actors Attach to the targets of the models they list
// and Detach when they stop listing one (or expire, or deregister). A target with no
// backend attached for Deps.CollectGrace is forgotten and its scheduler told so: it
// answers its parked requests as it would with no candidate, and stops. A backend that
// attaches again within the grace keeps the target. Counting under the lock that also
// spawns and forgets schedulers makes the two decisions exclusive: a backend actor holds
// its target's scheduler from Attach to Detach, so nothing a backend sends can reach a
// collected scheduler. Requests may still hold a collected scheduler's pid (looked up
// just before, or cached): a Route sent there is answered at once, as for a target
// without backends (see Epoch for callers that cache pids).
//
// One timer serves every target waiting out its grace: the grace is the same for all, so
// they wait in a queue in the order they went idle.
//
// A scheduler that panics is restarted with fresh state (failure.go); one that fails so
// often that it stops is marked lost and respawned, under the same pid, by the next
// Lookup or Attach: the directory never keeps a stopped scheduler for a live target.
type Directory struct {
	sys  *actor.ActorSystem
	deps Deps
	mu   sync.RWMutex
	m    map[Target]*entry
	// peak is the most entries m held since it was made: Go maps keep their buckets after
	// deletes, so m is rebuilt once most targets are gone.
	peak int
	// idle holds the targets whose last backend detached, oldest first (an entry attached
	// again since is skipped when its turn comes); sweeper fires when the first one's
	// grace ends.
	idle    []idleTarget
	sweeper *time.Timer
	stopped bool
	epoch   atomic.Uint64
	// sinceRelease counts the targets collected since memory was last handed back;
	// release hands it back (debug.FreeOSMemory; tests count the calls instead).
	sinceRelease int
	release      func()
	// spawned names the schedulers (see entry.name); lostByName holds the entries whose
	// scheduler was ever lost, by name, for the dead-letter handler.
	spawned    uint64
	lostByName map[string]*entry
	// dying holds the names of schedulers that stopped on failures until markLost has
	// marked their entries (read without d.mu by the dead-letter handler).
	dying sync.Map
	// viewSource gives a restarted scheduler its backends' current views (RestoreFrom);
	// restores counts the goroutines fetching them.
	viewSource atomic.Pointer[func(Target) []BackendView]
	restores   sync.WaitGroup
}

type entry struct {
	pid *actor.PID
	// life is the scheduler's (failure.go); name its actor name, kept by a respawn so the
	// pid stays the same; lost says the scheduler stopped after repeated failures and the
	// next Lookup or Attach respawns it.
	life *life
	name string
	lost bool
	// refs counts the backends attached (listing the target); idleSince is when it last
	// dropped to 0.
	refs      int
	idleSince time.Time
}

type idleTarget struct {
	t     Target
	since time.Time
}

// collected tells a scheduler that its target was forgotten: it answers its parked
// requests and stops.
type collected struct{}

// NewDirectory returns an empty directory spawning schedulers in sys.
func NewDirectory(sys *actor.ActorSystem, deps Deps) *Directory {
	d := &Directory{sys: sys, deps: deps, m: map[Target]*entry{}, release: debug.FreeOSMemory}
	sys.EventStream.SubscribeWithPredicate(d.deadRoute, isDeadRoute)
	return d
}

// Lookup returns the scheduler of t, or nil when t has no scheduler (never registered, or
// collected).
func (d *Directory) Lookup(t Target) *actor.PID {
	d.mu.RLock()
	e, ok := d.m[t]
	if !ok || !e.lost {
		d.mu.RUnlock()
		if ok {
			return e.pid
		}
		return nil
	}
	d.mu.RUnlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok = d.m[t]; !ok {
		return nil
	}
	if e.lost {
		d.spawnLocked(t, e)
	}
	return e.pid
}

// Attach returns the scheduler of t (spawning it when needed) for a backend that lists
// t's model; the target is kept until every Attach is matched by a Detach. Call it once
// per backend and target.
func (d *Directory) Attach(t Target) *actor.PID {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entryLocked(t)
	if e.lost {
		d.spawnLocked(t, e)
	}
	e.refs++
	return e.pid
}

// Detach undoes one Attach of t: the backend no longer lists the model. Once no backend is
// left, the target is collected after Deps.CollectGrace unless one attaches meanwhile;
// what the backend sent the scheduler before detaching is delivered before that.
func (d *Directory) Detach(t Target) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.m[t]
	if !ok || e.refs == 0 {
		return
	}
	e.refs--
	if e.refs > 0 {
		return
	}
	e.idleSince = d.deps.Now()
	d.idle = append(d.idle, idleTarget{t: t, since: e.idleSince})
	if len(d.idle) == 1 {
		d.armLocked(e.idleSince)
	}
}

// entryLocked returns t's entry, spawning its scheduler when it has none; d.mu is held.
func (d *Directory) entryLocked(t Target) *entry {
	if e, ok := d.m[t]; ok {
		return e
	}
	d.spawned++
	e := &entry{name: "scheduler-" + strconv.FormatUint(d.spawned, 36)}
	d.spawnLocked(t, e)
	d.m[t] = e
	d.peak = max(d.peak, len(d.m))
	return e
}

// spawnLocked spawns e's scheduler under e's name: a new target's, or a lost one's again
// (the same name gives the same pid, which the backend actors and cached lookups hold);
// d.mu is held.
func (d *Directory) spawnLocked(t Target, e *entry) {
	l := &life{target: t, name: e.name, deps: d.deps, dir: d, restore: e.lost}
	pid, err := d.sys.Root.SpawnNamed(l.props(), e.name)
	if err != nil {
		// Not expected: a stopped actor's name is free. A new name works for requests
		// looking the target up; the backend actors reach it at their next registration.
		if d.deps.Logger != nil {
			d.deps.Logger.Error("scheduler_respawn_failed", "routing_key", t.RoutingKey, "model", t.Model, "err", err.Error())
		}
		pid = d.sys.Root.Spawn(l.props())
	}
	e.pid, e.life, e.lost = pid, l, false
}

// lost is told by a scheduler that stopped (failure.go): unless the directory stopped it
// (collection, Stop), the target is marked lost, to be respawned by the next Lookup or
// Attach. It runs on a goroutine of its own: the scheduler's run may be inside a caller
// holding d.mu.
func (d *Directory) lost(l *life) {
	if d != nil {
		d.dying.Store(l.name, struct{}{})
		d.restores.Go(func() { d.markLost(l) })
	}
}

func (d *Directory) markLost(l *life) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.dying.Delete(l.name)
	e, ok := d.m[l.target]
	if d.stopped || !ok || e.life != l {
		return
	}
	e.lost = true
	if d.lostByName == nil {
		d.lostByName = map[string]*entry{}
	}
	d.lostByName[e.name] = e
	d.epoch.Add(1) // requests that cached the pid look it up again (and respawn it)
	if d.deps.Logger != nil {
		d.deps.Logger.Error("scheduler_stopped_after_failures", "routing_key", l.target.RoutingKey, "model", l.target.Model)
	}
}

// RestoreFrom sets the source of the backends' current views a restarted scheduler
// rebuilds its state from: views returns the views of every backend listing the target's
// model, and may block (it runs on a goroutine of its own). The gateway's fleet sets it.
// Without one, a restarted scheduler starts empty.
func (d *Directory) RestoreFrom(views func(Target) []BackendView) { d.viewSource.Store(&views) }

// views returns the view source (nil: none).
func (d *Directory) views() func(Target) []BackendView {
	if f := d.viewSource.Load(); f != nil {
		return *f
	}
	return nil
}

// goRestore runs f (a restore) on a goroutine of its own; Stop waits for it.
func (d *Directory) goRestore(f func()) {
	d.restores.Go(f)
}

// grace is the configured collection grace (a negative one means at once).
func (d *Directory) grace() time.Duration { return orDefault(d.deps.CollectGrace, DefaultCollectGrace) }

// orDefault is a setting where 0 asks for def and a negative value for 0.
func orDefault[T ~int | ~int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	default:
		return v
	}
}

// armLocked makes the sweeper fire when the grace of a target idle since since ends; d.mu
// is held and no earlier sweep is pending.
func (d *Directory) armLocked(since time.Time) {
	if d.stopped {
		return
	}
	wait := max(since.Add(d.grace()).Sub(d.deps.Now()), 0)
	if d.sweeper == nil {
		d.sweeper = time.AfterFunc(wait, d.sweep)
	} else {
		d.sweeper.Reset(wait)
	}
}

// sweepBatch bounds the targets forgotten per hold of d.mu, so lookups are not held up
// for long by a mass collection.
const sweepBatch = 512

// releaseAfter is the configured release threshold (0: never).
func (d *Directory) releaseAfter() int { return orDefault(d.deps.ReleaseAfter, DefaultReleaseAfter) }

// sweep forgets every target whose grace has ended without a backend attaching, then tells
// their schedulers (outside the lock: a scheduler may run on this goroutine).
//
// After a mass collection (at least ReleaseAfter targets, and no other target waiting out
// its grace: the burst is over) it hands the freed memory back to the operating system at
// once. Left to itself, an idle gateway keeps it for minutes: with little allocating
// nothing triggers a collection until the runtime's periodic one (every 2 minutes), and
// the pages go back to the system gradually after that. Measured after 200 000 targets:
// 824 MB resident 60 s after the backends expired, 73 MB only 4.5 minutes later. The cost
// is one garbage collection over a heap that is by then mostly garbage, plus returning
// the pages, on this goroutine and once per burst.
func (d *Directory) sweep() {
	var pids []*actor.PID
	for {
		pids = pids[:0]
		d.mu.Lock()
		now, grace := d.deps.Now(), d.grace()
		for len(d.idle) > 0 && len(pids) < sweepBatch && !d.stopped {
			it := d.idle[0]
			if now.Sub(it.since) < grace {
				break
			}
			d.idle[0] = idleTarget{}
			d.idle = d.idle[1:]
			if e, ok := d.m[it.t]; ok && e.refs == 0 && e.idleSince.Equal(it.since) {
				delete(d.m, it.t)
				delete(d.lostByName, e.name)
				pids = append(pids, e.pid)
			}
		}
		more := len(pids) == sweepBatch
		if len(pids) > 0 {
			d.epoch.Add(1)
			d.shrinkLocked()
			d.sinceRelease += len(pids)
		}
		release := false
		if len(d.idle) == 0 {
			d.idle = nil // let a long queue's array go
			if n := d.releaseAfter(); !more && n > 0 && d.sinceRelease >= n {
				d.sinceRelease, release = 0, true
			}
		} else if !more {
			d.armLocked(d.idle[0].since)
		}
		d.mu.Unlock()
		for _, pid := range pids {
			d.sys.Root.Send(pid, collected{})
		}
		if release {
			d.release()
		}
		if !more {
			return
		}
	}
}

// shrinkLocked rebuilds m once it holds a quarter of its peak; d.mu is held.
func (d *Directory) shrinkLocked() {
	if d.peak < 1024 || len(d.m) > d.peak/4 {
		return
	}
	m := make(map[Target]*entry, len(d.m))
	for k, v := range d.m {
		m[k] = v
	}
	d.m, d.peak = m, len(m)
}

// Epoch changes whenever targets are collected. A caller that keeps a pid from Lookup
// should read Epoch before the Lookup and look up again once Epoch differs: the pid of a
// collected target answers every Route as a target without backends, even after the
// target came back with a new scheduler.
func (d *Directory) Epoch() uint64 { return d.epoch.Load() }

// Len returns the number of targets with a scheduler.
func (d *Directory) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.m)
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

// ResetBalancers sends ResetBalancers{cfg} to every target's scheduler: balancer instances
// of definitions cfg no longer has are dropped (the gateway does it when the lb-config is
// reloaded, so they do not linger), the others keep their state; nil drops them all.
func (d *Directory) ResetBalancers(cfg *lbconfig.Config) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, e := range d.m {
		d.sys.Root.Send(e.pid, ResetBalancers{Config: cfg})
	}
}

// Stop stops every scheduler (parked requests are answered 503) and waits for them.
func (d *Directory) Stop() {
	d.mu.Lock()
	m := d.m
	d.m, d.peak, d.idle, d.stopped = map[Target]*entry{}, 0, nil, true
	if d.sweeper != nil {
		d.sweeper.Stop()
	}
	d.mu.Unlock()
	for _, e := range m {
		_ = d.sys.Root.StopFuture(e.pid).Wait()
	}
	d.restores.Wait()
}

func isDeadRoute(evt any) bool {
	dl, ok := evt.(*actor.DeadLetterEvent)
	if !ok {
		return false
	}
	_, ok = dl.Message.(Route)
	return ok
}

// deadRoute answers a Route that reached a stopped scheduler (a collected target's, or
// any after Stop) at once, as a scheduler without backends would: its request must not
// wait for an answer that never comes.
func (d *Directory) deadRoute(evt any) {
	dl := evt.(*actor.DeadLetterEvent) //nolint:forcetypeassert // isDeadRoute checked it
	m := dl.Message.(Route)            //nolint:forcetypeassert // isDeadRoute checked it
	p := m.P
	d.mu.RLock()
	stopped := d.stopped
	var (
		lost  bool
		again *actor.PID
	)
	if _, dying := d.dying.Load(dl.PID.GetId()); dying {
		lost = true
	} else if e := d.lostByName[dl.PID.GetId()]; e != nil {
		lost = e.lost
		if !lost {
			again = e.pid // respawned since
		}
	}
	d.mu.RUnlock()
	if again != nil && !stopped {
		d.sys.Root.Send(again, m)
		return
	}
	r := noCandidates(p)
	switch {
	case stopped:
		r = ReasonShuttingDown
	case lost:
		r = ReasonSchedulerFailed
	default:
	}
	d.deps.Observer.Rejected(Target{}, r)
	p.Mailbox <- Outcome{Kind: OutcomeRejected, Reason: r}
}

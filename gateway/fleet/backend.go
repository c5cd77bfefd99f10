package fleet

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/internal/wire"
)

// Messages of the backend actor. All are values except loadReported, which travels as a
// pooled pointer (see reportPool).
type (
	// registered is a (re-)registration; reg and its Models map belong to the actor once
	// sent (Fleet.Register's caller does not keep them).
	registered struct {
		reg wire.Registration
		at  time.Time
	}
	// loadUpdated is a pylon's load update (Fleet.UpdateLoad); the update belongs to the
	// actor once sent.
	loadUpdated struct {
		update *wire.LoadUpdate
		at     time.Time
	}
	// loadReported is a pylon's x-pylon-load report, sent as *loadReported from reportPool;
	// the actor owns it once sent and puts it back after applying it.
	loadReported struct {
		report wire.LoadReport
		at     time.Time
	}
	// reportReady says the backend's report slot holds a report (see Fleet.ReportLoad).
	reportReady struct{}
	// rttMeasured is the round trip of a health probe.
	rttMeasured struct{ rtt time.Duration }
	// deregistered says the pylon deregistered: the backend leaves at once, as on expiry.
	deregistered struct{}
	// stateRequest asks for the backend's State (debug, /v1/models, scrape-time metrics).
	stateRequest struct{}
	// viewRequest asks for the backend's current view of a model (answered with a
	// viewReply), for a scheduler restoring its state after a failure.
	viewRequest struct{ model string }
	viewReply   struct {
		view dispatch.BackendView
		ok   bool // the backend lists the model
	}
)

// reportPool recycles load report messages: one arrives with every pylon response.
var reportPool = sync.Pool{New: func() any { return new(loadReported) }}

// missedHeartbeats is how many heartbeats a backend may miss before it expires.
const missedHeartbeats = 3

type modelView struct {
	status     string
	generation uint64
	build      uint64 // the pylon's snapshot build the view's load comes from (0 = unknown)
	view       dispatch.BackendView
	// scheduler is the model's scheduler, attached (Directory.Attach) from the first
	// registration listing the model until the model is dropped: while attached, the
	// target cannot be collected and the pid stays good.
	scheduler *actor.PID
}

// backendActor owns one backend's state.
type backendActor struct {
	fleet    *Fleet
	b        *Backend
	models   map[string]*modelView
	rtt      time.Duration
	hasRTT   bool
	lastSeen time.Time
	deadline time.Time
	// heartbeat is the last registration's heartbeat (the gateway's default when it
	// sets none): load updates refresh the deadline with it.
	heartbeat time.Duration
	// slotShare is the last registration's engine slot share (0: none).
	slotShare uint64
	alarm     *actors.Alarm
	gone      bool
	health    health
	// incarnated is set once the actor was made (see incarnate).
	incarnated bool
}

// incarnate is the backend actor's producer. The first call returns the actor; a later one
// is protoactor restarting it after a panic, which leaves its state suspect: the backend
// leaves the fleet at once, as if it had expired (its schedulers drop it, requests granted
// to it fail over), and the new incarnation only stops the actor. The pylon's next
// registration (every heartbeat) brings the backend back with fresh state.
func (a *backendActor) incarnate() actor.Actor {
	if !a.incarnated {
		a.incarnated = true
		return a
	}
	a.failed()
	return stopActor{}
}

// failed takes a backend whose actor panicked out of the fleet, as well as its state
// allows.
func (a *backendActor) failed() {
	defer func() { _ = recover() }() // best effort: the state may be what failed
	a.fleet.deps.Logger.Error("backend_actor_failed", "backend", a.b.ID, "detail", "the backend leaves until its next registration")
	if a.alarm != nil {
		a.alarm.Stop()
	}
	if a.gone {
		return
	}
	a.gone = true
	a.leave()
	a.removeAll()
	a.fleet.forget(a.b)
}

// stopActor is what a failed backend actor restarts as: it stops at once.
type stopActor struct{}

func (stopActor) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); ok {
		c.Stop(c.Self())
	}
}

func (a *backendActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		a.alarm = actors.NewAlarm(c.ActorSystem().Root, c.Self())
	case *actor.Stopping:
		a.alarm.Stop()
		a.leave()
		a.removeAll()
	case registered:
		a.onRegistered(m)
		a.rearm(a.fleet.deps.Now())
	case loadUpdated:
		a.onLoadUpdated(m)
		a.rearm(a.fleet.deps.Now())
	case *loadReported:
		a.onLoad(m)
		*m = loadReported{}
		reportPool.Put(m)
	case reportReady:
		if m, ok := a.b.takeReport(); ok {
			a.onLoad(&m)
		}
	case rttMeasured:
		a.rtt, a.hasRTT = m.rtt, true
		a.onProbeOK(a.fleet.deps.Now())
		a.notifyAll()
	case succeeded:
		a.onSucceeded()
	case failed:
		now := a.fleet.deps.Now()
		a.onFailed(m, now)
		a.rearm(now)
	case actors.Tick:
		now := a.fleet.deps.Now()
		if !now.Before(a.deadline) {
			a.alarm.Fired()
			a.fleet.deps.Logger.Info("backend_expired", "backend", a.b.ID, "missed_heartbeats", missedHeartbeats)
			a.expire(c)
			// Gone without a word: nothing it has not begun to answer will come back.
			a.fleet.abandon(a.b, "expired", expiredStall(now.Sub(a.lastSeen)))
			return
		}
		a.checkEjection(now)
		a.rearm(now)
	case stateRequest:
		c.Respond(a.stateNow())
	case viewRequest:
		if mv, ok := a.models[m.model]; ok {
			c.Respond(viewReply{view: a.viewOf(mv), ok: true})
		} else {
			c.Respond(viewReply{})
		}
	case deregistered:
		a.fleet.deps.Logger.Info("backend_deregistered", "backend", a.b.ID)
		a.expire(c)
		return
	default:
	}
}

// rearm sets the alarm for the next of the liveness deadline and the end of an ejection.
func (a *backendActor) rearm(now time.Time) {
	a.alarm.Fired()
	a.alarm.Arm(now, a.deadline)
	if a.health.ejected {
		a.alarm.Arm(now, a.health.until)
	}
}

func (a *backendActor) expire(c actor.Context) {
	if a.gone {
		return
	}
	a.gone = true
	a.leave()
	a.removeAll()
	a.fleet.forget(a.b)
	c.Stop(c.Self())
}

func (a *backendActor) removeAll() {
	for name, mv := range a.models {
		a.drop(name, mv)
	}
	clear(a.models)
}

func (a *backendActor) target(model string) dispatch.Target {
	return dispatch.Target{RoutingKey: a.b.RoutingKey, Model: model}
}

// drop tells model's scheduler that this backend left it, then detaches from the target
// (in that order: the scheduler sees the removal before it can be collected).
func (a *backendActor) drop(model string, mv *modelView) {
	a.fleet.deps.System.Root.Send(mv.scheduler, dispatch.BackendRemoved{ID: a.b.ID})
	a.fleet.deps.Schedulers.Detach(a.target(model))
}

// seen refreshes the backend's liveness: it expires missedHeartbeats heartbeats (at least
// MinExpiry) after at unless it is heard from again.
func (a *backendActor) seen(at time.Time) {
	a.lastSeen, a.deadline = at, at.Add(max(missedHeartbeats*a.heartbeat, a.fleet.deps.MinExpiry))
}

func (a *backendActor) onRegistered(m registered) {
	a.heartbeat = time.Duration(min(m.reg.HeartbeatMs, 3_600_000)) * time.Millisecond
	if a.heartbeat <= 0 {
		a.heartbeat = a.fleet.deps.DefaultHeartbeat
	}
	a.slotShare = m.reg.EngineSlotShare
	a.seen(m.at)
	for name, mv := range a.models {
		if _, ok := m.reg.Models[name]; !ok {
			delete(a.models, name)
			a.drop(name, mv)
		}
	}
	for name := range m.reg.Models {
		rm := m.reg.Models[name]
		l, err := rm.Stats.Load()
		if err != nil {
			continue // validated by the control endpoint
		}
		reg := wire.LoadReport{Generation: rm.Generation, Build: rm.Build, DispatchSeq: m.reg.DispatchSeq, Load: l}
		mv, ok := a.models[name]
		if !ok {
			mv = &modelView{scheduler: a.fleet.deps.Schedulers.Attach(a.target(name))}
			a.models[name] = mv
		}
		mv.status = rm.Status
		a.applySnapshot(mv, &reg, ok, m.at)
	}
}

// onLoadUpdated applies a load update: the models it lists take its stats as they would
// a registration's (capabilities and sources stay those of the last registration); a
// model or generation the backend does not list any more (a registration overtook the
// update) is left alone.
func (a *backendActor) onLoadUpdated(m loadUpdated) {
	a.seen(m.at)
	for i := range m.update.Models {
		r := &m.update.Models[i]
		mv, ok := a.models[r.Model]
		if !ok || mv.generation != r.Generation {
			continue
		}
		r.Load.Capabilities, r.Load.Sources = mv.view.Load.Capabilities, mv.view.Load.Sources
		a.applySnapshot(mv, r, true, m.at)
	}
}

// applySnapshot sets mv's load from a pylon snapshot (a registration's or a load
// update's) taken as of at; known says mv already holds a view, which a snapshot older
// than the load reports applied since only completes (LoadReport.Registered).
func (a *backendActor) applySnapshot(mv *modelView, snap *wire.LoadReport, known bool, at time.Time) {
	next := *snap
	if known {
		next = snap.Registered(&wire.LoadReport{Generation: mv.generation, Build: mv.build, DispatchSeq: mv.view.SeqEcho, Load: mv.view.Load})
	}
	mv.generation, mv.build = next.Generation, next.Build
	mv.view.Load, mv.view.SeqEcho = next.Load, next.DispatchSeq
	mv.view.UpdatedAt = at
	a.notify(mv)
}

func (a *backendActor) onLoad(m *loadReported) {
	r := &m.report
	mv, ok := a.models[r.Model]
	if !ok || (r.Generation != 0 && mv.generation != 0 && r.Generation != mv.generation) {
		return
	}
	if !r.Supersedes(mv.view.SeqEcho, mv.view.Load.ObservedAtUnixMilli, mv.build) {
		return
	}
	r.MergeInto(&mv.view.Load)
	mv.view.SeqEcho, mv.build = r.DispatchSeq, r.Build
	mv.view.UpdatedAt = m.at
	a.notify(mv)
}

func (a *backendActor) notify(mv *modelView) {
	v := a.viewOf(mv)
	a.fleet.deps.System.Root.Send(mv.scheduler, dispatch.NewBackendChanged(&v))
}

// viewOf is the backend's current view of mv's model, as its scheduler gets it.
func (a *backendActor) viewOf(mv *modelView) dispatch.BackendView {
	v := mv.view
	v.ID, v.URL, v.ClusterID, v.Seq = a.b.ID, a.b.URL, a.b.ClusterID, &a.b.seq
	v.Active = mv.status == wire.StatusActive
	v.RTT, v.HasRTT = a.rtt, a.hasRTT
	v.Ejected, v.EjectedAt = a.health.ejected, a.health.at
	v.SlotShare = a.slotShare
	return v
}

// stateNow builds the backend's State (on request only: never on the per-response path).
func (a *backendActor) stateNow() *State {
	now := a.fleet.deps.Now()
	s := &State{
		ID: a.b.ID, URL: a.b.URL, ClusterID: a.b.ClusterID, RoutingKey: a.b.RoutingKey,
		RTTMs: float64(a.rtt) / float64(time.Millisecond), HasRTT: a.hasRTT, LastSeen: a.lastSeen,
		Models: make(map[string]*ModelState, len(a.models)), Health: a.health.state(),
	}
	for name, mv := range a.models {
		st := wire.StatsFromLoad(&mv.view.Load)
		s.Models[name] = &ModelState{
			Status: mv.status, Generation: mv.generation, SeqEcho: mv.view.SeqEcho, Stats: st,
			StatsAgeMs: now.Sub(mv.view.UpdatedAt).Milliseconds(),
		}
		if mv.status == wire.StatusActive && a.hasRTT {
			s.Routable = true
		}
	}
	return s
}

package pylon

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/stats"
)

// sweepInterval is the period of the staleness sweep (stats.RequestStateTTL,
// stats.ModelStatsTTL).
const sweepInterval = time.Second

type phaseCount struct{ requests, tokens uint64 }

// genSnapshot is the view of a generation's aggregate that the data path (x-pylon-load),
// the registrars (only when they send) and the metrics (only when scraped) read without
// messages. The actor builds it lazily: a change only marks the generation dirty; the
// snapshot is rebuilt in place, at most once per batch of changes, when a reader needs it
// (see generation.snapshot and the acknowledged request messages), under a lock that
// readers take only to copy it out. Nothing is allocated: the queue estimates live in pq
// unless more than len(pq) priorities have queued work (then in a slice of their own,
// never written again).
type genSnapshot struct {
	build  uint64 // the generation's builds count when this snapshot was built (1, 2, …)
	load   load.Load
	phases [3]phaseCount
	pq     [4]load.PriorityEstimate
}

// generation is the handle of one (model, generation) actor.
type generation struct {
	model string
	gen   uint64
	pid   *actor.PID
	// mu guards cur and have: the actor rebuilds cur in place, readers copy it out.
	mu     sync.RWMutex
	cur    genSnapshot
	have   bool
	builds uint64 // snapshots built
	// delivered maps a gateway to the build it last received in an x-pylon-load, and
	// when (unix ns).
	deliveredMu sync.Mutex
	delivered   map[*gatewayState]delivery
	// dirty is set by the actor when its aggregate changed after cur was built and
	// cleared once cur is rebuilt (after the rebuild, so !dirty implies cur is current).
	dirty atomic.Bool
	// done is closed when the actor has stopped: callers waiting for a reply give up.
	done    chan struct{}
	replies *replyPool
	// stopping marks a deliberate stop (shutdown, a test): the actor's end is then no
	// failure, and the generation is not replaced (see genLife).
	stopping atomic.Bool
	// life is what the actor keeps across its incarnations (generation_life.go).
	life *genLife
	// srcMu guards src, the engine's last reports: what a new incarnation starts from.
	srcMu sync.Mutex
	src   engineSources
}

// replyPool recycles the one-slot reply channels of calls to generation actors. There is
// one per pylon (not a global: a channel belongs to the synctest bubble that made it).
type replyPool struct{ p sync.Pool }

func newReplyPool() *replyPool {
	return &replyPool{p: sync.Pool{New: func() any { return make(chan reply, 1) }}}
}

func (rp *replyPool) get() chan reply { return rp.p.Get().(chan reply) }

// put recycles ch; only a channel whose reply was received may be put back.
func (rp *replyPool) put(ch chan reply) { rp.p.Put(ch) }

// callMsgs are one request's acknowledged messages to its generation actor, recycled once
// the request is done: the actor keeps nothing of a message it has answered. A message
// whose call gave up (the actor stopped first) may still sit in the mailbox, so its set is
// never recycled.
type callMsgs struct {
	admitted requestAdmitted
	started  responseStarted
	done     completed
	lost     bool
}

var callMsgsPool = sync.Pool{New: func() any { return new(callMsgs) }}

func acquireCallMsgs() *callMsgs {
	return callMsgsPool.Get().(*callMsgs) //nolint:forcetypeassert // the pool holds only *callMsgs
}

func releaseCallMsgs(m *callMsgs) {
	if m.lost {
		return
	}
	*m = callMsgs{}
	callMsgsPool.Put(m)
}

// call sends m, which carries ch, to the actor and waits for the answer; ok is false when
// the actor stopped first. On its inline mailbox an idle actor has already answered when
// Send returns, so this costs no goroutine switch.
func (g *generation) call(sender actor.SenderContext, m any, ch chan reply) (r reply, ok bool) {
	sender.Send(g.pid, m)
	select {
	case r = <-ch:
		return r, true
	case <-g.done:
		return reply{unavailable: true}, false
	}
}

// snapshot returns a copy of the current snapshot (nil before the first one), first
// asking the actor to rebuild it when it is dirty. For occasional readers (registrars,
// metrics, calibration); the data path formats x-pylon-load under the lock instead
// (appendLoadReport).
func (g *generation) snapshot(sender actor.SenderContext) *genSnapshot {
	g.flushIfDirty(sender)
	s := new(genSnapshot)
	if ok, _ := g.published(s); !ok {
		return nil
	}
	return s
}

// appendLoadReport appends the x-pylon-load value of the current snapshot (rebuilt first
// when dirty) to b, formatted under the read lock so the data path copies nothing.
// The report echoes gw's highest dispatch seq, and the build is noted as delivered to gw
// (nil for a caller that is not a gateway) at now.
func (g *generation) appendLoadReport(sender actor.SenderContext, b []byte, gw *gatewayState, now time.Time) ([]byte, bool) {
	g.flushIfDirty(sender)
	g.mu.RLock()
	if !g.have {
		g.mu.RUnlock()
		return b, false
	}
	r := wire.LoadReport{Model: g.model, Generation: g.gen, Load: g.cur.load, Build: g.cur.build}
	if gw != nil {
		r.DispatchSeq = gw.seq.Load()
	}
	b = wire.AppendLoadReport(b, &r)
	build := g.builds
	g.mu.RUnlock()
	if gw != nil {
		g.deliveredMu.Lock()
		if g.delivered == nil {
			g.delivered = map[*gatewayState]delivery{}
		}
		d, ok := g.delivered[gw]
		if !ok && len(g.delivered) >= maxGateways {
			// Gateways left the table (gatewayIdle): their deliveries go with them.
			cut := now.Add(-gatewayIdle).UnixNano()
			maps.DeleteFunc(g.delivered, func(_ *gatewayState, d delivery) bool { return d.at < cut })
		}
		g.delivered[gw] = delivery{build: max(d.build, build), at: max(d.at, now.UnixNano())}
		g.deliveredMu.Unlock()
	}
	return b, true
}

type delivery struct {
	build uint64
	at    int64 // unix ns
}

// deliveredTo tells whether gw received the current snapshot in a response with nothing
// changed since (held), and when it last received one (unix ns, 0 = never).
func (g *generation) deliveredTo(gw *gatewayState) (held bool, at int64) {
	if gw == nil {
		return false, 0
	}
	dirty := g.dirty.Load()
	g.mu.RLock()
	build := g.builds
	g.mu.RUnlock()
	g.deliveredMu.Lock()
	d := g.delivered[gw]
	g.deliveredMu.Unlock()
	return !dirty && d.build == build, d.at
}

// flushIfDirty asks the actor to rebuild the snapshot when it is dirty.
func (g *generation) flushIfDirty(sender actor.SenderContext) {
	if g.dirty.Load() {
		ch := g.replies.get()
		if _, ok := g.call(sender, &flush{reply: ch}, ch); ok {
			g.replies.put(ch)
		}
	}
}

// published copies the snapshot as last built into dst, without asking for a rebuild; it
// also returns how many snapshots were built so far.
func (g *generation) published(dst *genSnapshot) (ok bool, builds uint64) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.have {
		return false, g.builds
	}
	*dst = g.cur
	if q := g.cur.load.QueueEstimates; q != nil && len(q) <= len(g.cur.pq) && (len(q) == 0 || &q[0] == &g.cur.pq[0]) {
		dst.load.QueueEstimates = dst.pq[:len(q)] // not the actor's array, which it reuses
	}
	return true, g.builds
}

// modelEntry is one model id ever seen: its metrics and current generation (nil while
// no generation is admitted).
type modelEntry struct {
	name    string
	cur     atomic.Pointer[generation]
	metrics *modelMetrics
}

// genActor owns one generation's aggregate (one protoactor actor per model generation).
// Every message is applied to the pure stats.Aggregate; a change marks the generation dirty
// and tells the registrars (which coalesce: only the first change after each of their sends
// posts to them). The snapshot is rebuilt only for a reader: before acknowledging a
// request's responseStarted or completed (the handler then writes x-pylon-load, which so
// includes its own request), before answering a rejected admission, and on flush
// (registrars, metrics).
//
// It runs on an inline mailbox (genLife.props, actors.InlineMailbox): a message sent while
// the actor is idle is processed on the sender's goroutine, so a request handler's calls
// cost no goroutine hop; messages that arrive meanwhile are processed in order by whichever
// goroutine is running the mailbox. Receive never blocks. A panic restarts the actor as a
// new genActor with a new aggregate (generation_life.go).
type genActor struct {
	g        *generation
	life     *genLife
	agg      *stats.Aggregate
	adm      admission.Config
	now      func() time.Time
	onChange func()
	alarm    *actors.Alarm
	dirty    bool
	// holds are the admitted requests held back from the engine while this pylon's own
	// requests there fill its slot share, oldest first (see holdPastShare).
	holds []heldRequest
}

// heldRequest is a request held back from the engine; closing release lets it go on.
type heldRequest struct {
	id      string
	release chan struct{}
}

// holdPastShare holds the request id, just admitted, back from the engine when the
// admission policy says so (admission.Config.HoldsPastShare): it then waits in the pylon,
// in admission order, for one of the pylon's own requests there to finish (at most
// Config.SlotShareWait), instead of pushing the engine past the concurrency the shares
// divide. It returns the channel closed when the request may go on, or nil when it need
// not wait.
func (a *genActor) holdPastShare(id string) chan struct{} {
	if !a.adm.HoldsPastShare(a.agg.AtEngine()) || !a.agg.Hold(id) {
		return nil
	}
	h := heldRequest{id: id, release: make(chan struct{})}
	a.holds = append(a.holds, h)
	return h.release
}

// releaseHolds lets held requests go on, oldest first, while the share has room
// (admission.Config.ShareHasRoom).
func (a *genActor) releaseHolds() {
	n := 0
	for n < len(a.holds) && a.adm.ShareHasRoom(a.agg.AtEngine()) {
		a.agg.Unhold(a.holds[n].id)
		close(a.holds[n].release)
		n++
	}
	if n > 0 {
		a.holds = slices.Delete(a.holds, 0, n)
	}
}

// dropHold ends the hold of a request whose wait ran out (it goes on to the engine).
func (a *genActor) dropHold(id string) {
	for i := range a.holds {
		if a.holds[i].id == id {
			a.agg.Unhold(id)
			a.holds = slices.Delete(a.holds, i, i+1)
			return
		}
	}
}

// releaseAllHolds lets every held request go on: the actor stops or failed.
func (a *genActor) releaseAllHolds() {
	for _, h := range a.holds {
		close(h.release)
	}
	a.holds = nil
}

func (a *genActor) Receive(c actor.Context) {
	defer func() {
		if r := recover(); r != nil {
			// A caller waiting on this message must not hang on a bug: answer it, then let
			// protoactor's supervision restart the actor with a new instance (genLife).
			a.fail(c.Message(), r)
			panic(r)
		}
	}()
	l := a.life
	if f := l.fault.Load(); f != nil {
		(*f)(l.g.model, c.Message())
	}
	switch m := c.Message().(type) {
	case *requestAdmitted:
		if l.retired {
			m.reply <- reply{unavailable: true}
			return
		}
		now := a.now()
		d := a.agg.AdmitDispatch(m.id, m.priority, m.inputTokens, m.expectedMs, m.hasExpected, m.from, a.adm, now)
		var hold chan struct{}
		if d.Admit() {
			hold = a.holdPastShare(m.id)
			a.changed()
		} else {
			a.refresh(now) // the 429 carries x-pylon-load
		}
		m.reply <- reply{decision: d, hold: hold}
	case *responseStarted:
		a.agg.ResponseStarted(m.id)
		a.changed()
		a.refresh(a.now())
		m.reply <- reply{}
	case *firstOutput:
		a.agg.FirstOutput(m.id, m.at)
		a.changed()
	case *finished:
		a.agg.Finish(m.id, m.outputTokens, m.decode, m.at)
		a.releaseHolds()
		a.changed()
	case *completed:
		a.agg.ResponseStarted(m.id)
		if m.output {
			a.agg.FirstOutput(m.id, m.at)
		}
		a.agg.Finish(m.id, m.outputTokens, 0, m.at)
		a.releaseHolds()
		a.changed()
		a.refresh(m.at)
		m.reply <- reply{}
	case *holdExpired:
		a.dropHold(m.id)
		a.changed()
	case *flush:
		a.refresh(a.now())
		m.reply <- reply{}
	case *updated:
		if a.agg.Apply(&m.update, a.now()) {
			a.changed()
		}
	case actors.Tick:
		if a.alarm == nil {
			return // a failed instance's Tick reaching one whose start failed
		}
		now := a.now()
		a.alarm.Fired()
		if l.retired && !now.Before(l.retireAt) {
			c.Stop(c.Self())
			return
		}
		if a.agg.Sweep(now) {
			a.changed()
		}
		a.alarm.Arm(now, now.Add(sweepInterval))
	case *retire:
		now := a.now()
		l.retired, l.retireAt = true, now.Add(RetireGrace)
		a.alarm.Arm(now, l.retireAt)
	case *actor.Started:
		now := a.now()
		a.alarm = actors.NewAlarm(c.ActorSystem().Root, c.Self())
		a.alarm.Arm(now, now.Add(sweepInterval))
		if l.retired {
			a.alarm.Arm(now, l.retireAt) // a restarted instance of a retired generation
		}
	case *actor.Stopping:
		if a.alarm != nil { // nil: this instance failed before it started
			a.alarm.Stop()
		}
	case *actor.Stopped:
		a.releaseAllHolds()
		l.stopped()
	default:
	}
}

// changed marks the snapshot stale and tells the registrars (not for a retired generation:
// gateways no longer see it).
func (a *genActor) changed() {
	if !a.dirty {
		a.dirty = true
		a.g.dirty.Store(true)
	}
	if !a.life.retired {
		a.onChange()
	}
}

// refresh rebuilds the snapshot if it is stale.
func (a *genActor) refresh(now time.Time) {
	if a.dirty {
		a.publish(now)
	}
}

// publish rebuilds the snapshot from the aggregate, in place. Should the rebuild panic (a
// bug), the torn snapshot is withdrawn (no x-pylon-load, no registration figures) until
// the restarted instance publishes its own, and the lock is released.
func (a *genActor) publish(now time.Time) {
	g := a.g
	g.mu.Lock()
	built := false
	defer func() {
		if !built {
			g.have = false
		}
		g.mu.Unlock()
	}()
	s := &g.cur
	*s = genSnapshot{}
	a.agg.LoadInto(&s.load, now, s.pq[:0])
	for i, ph := range stats.Phases {
		s.phases[i].requests, s.phases[i].tokens = a.agg.PhaseCounts(ph)
	}
	g.have = true
	g.builds++
	s.build = g.builds
	built = true
	a.dirty = false
	g.dirty.Store(false)
}

// Messages of the generation actor, all sent as pointers and not changed once sent. Those
// with a reply channel are answered exactly once; they live in a request's pooled callMsgs,
// recycled when the request is done (see callMsgs), and their channels come from replyPool.
type (
	// requestAdmitted asks for admission of a request (pooled in callMsgs).
	requestAdmitted struct {
		id          string
		priority    uint32
		inputTokens uint64
		expectedMs  uint64
		hasExpected bool
		from        stats.Dispatch // the dispatching gateway and its seq (zero: none)
		reply       chan reply
	}
	// reply is the actor's answer on a message's reply channel (a value).
	reply struct {
		decision    admission.Decision
		unavailable bool
		failed      bool // with unavailable: the generation failed on this message (a bug)
		// hold, for an admitted request held back from the engine, is closed when it may
		// go on (nil: no wait); see genActor.holdPastShare.
		hold chan struct{}
	}
	// responseStarted says the engine's response began (pooled in callMsgs).
	responseStarted struct {
		id    string
		reply chan reply
	}
	// firstOutput is the first output token of a streamed response.
	firstOutput struct {
		id string
		at time.Time
	}
	// finished ends a streamed response.
	finished struct {
		id           string
		at           time.Time
		outputTokens uint64
		decode       time.Duration
	}
	// completed reports a buffered (non-streamed) response: headers, output (when
	// output) and completion at one instant, in one message (pooled in callMsgs).
	completed struct {
		id           string
		at           time.Time
		outputTokens uint64
		output       bool
		reply        chan reply
	}
	// flush asks for the snapshot to be rebuilt if it is stale.
	flush struct{ reply chan reply }
	// updated carries engine stats; the update's pointers are the engine loop's, handed
	// over and read only (one update for every model shares them).
	updated struct{ update stats.Update }
	// retire says the model is no longer served: the generation ends after RetireGrace.
	retire struct{}
	// holdExpired says a held request's wait ran out: it goes on to the engine.
	holdExpired struct{ id string }
)

func (m *requestAdmitted) replyTo() chan reply { return m.reply }
func (m *responseStarted) replyTo() chan reply { return m.reply }
func (m *completed) replyTo() chan reply       { return m.reply }
func (m *flush) replyTo() chan reply           { return m.reply }

package dispatch

import (
	"container/heap"
	"fmt"
	"runtime/debug"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
)

// A scheduler that panics (a bug) fails like this:
//
//   - At once, on the goroutine that ran the failing message: the request of that message
//     (a Route, or the parked requests a re-evaluation was retrying), every parked request
//     and every request held for a restore is answered with ReasonSchedulerFailed (503
//     routing_failed). Nothing waits for a timeout.
//   - The actor is restarted by protoactor's supervision (same pid, so the backend actors
//     and cached lookups keep reaching it) with a new, empty Scheduler: none of the failed
//     instance's state survives — candidates, reservations, balancers, corrections.
//   - The new instance rebuilds its backends from their current views, asked from the
//     backend actors (Directory.RestoreFrom; the gateway's fleet provides them). Requests
//     that arrive meanwhile are held and routed once the views are in (within about a
//     second, the views' timeout). Without a view source it starts empty and the next
//     load report or registration of each backend fills it in.
//   - More than 10 failures within 10 s (protoactor's default supervision) stop the
//     scheduler. The directory then marks its target lost: the next Lookup or Attach spawns
//     a new scheduler under the same name — the same pid — and restores it the same way.
//     Routes that reach the stopped scheduler before that are answered with
//     ReasonSchedulerFailed.

// life is what a target's scheduler keeps across its incarnations (restarts): the actor's
// identity, whether it stopped, and the current instance, which the mailbox tells of a
// failure. The mailbox's run is the only goroutine using it (one message at a time).
type life struct {
	target Target
	name   string // the actor's name (see entry.name)
	deps   Deps
	dir    *Directory
	self   *actor.PID
	sys    *actor.ActorSystem
	// current is the live instance; incarnations counts the instances made.
	current      *Scheduler
	incarnations int
	// stopped is set once the actor stopped (see stoppedInvoker); restore asks the first
	// instance to restore its backends' views too (a respawned target's); retired says the
	// directory collected the target (its stop is no failure).
	stopped bool
	restore bool
	retired bool
}

// incarnate makes the scheduler's next instance: always a new one.
func (l *life) incarnate() actor.Actor {
	s := newScheduler(l.target, l.deps)
	s.life = l
	l.current = s
	l.incarnations++
	// A restarted instance (or the first of a respawned target) waits for its backends'
	// views before routing.
	s.restoring = l.dir != nil && l.dir.views() != nil && (l.incarnations > 1 || l.restore)
	return s
}

// props returns the actor props of l's scheduler. The mailbox (actors.InlineMailbox) runs
// on the sender's goroutine when the scheduler is idle: a Route from a handler is decided
// inline, without a goroutine hop or an allocation, while messages that arrive during
// processing are still handled one at a time, in order, by whichever goroutine is running
// the mailbox.
func (l *life) props() *actor.Props {
	return actor.PropsFromProducer(l.incarnate, actor.WithMailbox(func() actor.Mailbox {
		return &stoppedMailbox{Mailbox: actors.InlineMailbox(), l: l}
	}))
}

// stoppedMailbox is the scheduler's mailbox with two changes: a user message it delivers
// after the scheduler stopped goes to the dead letters (where a Route is answered, see
// Directory) instead of being dropped — such messages were posted while the scheduler was
// stopping; those posted after it stopped go to the dead letters anyway — and a failure
// (panic) is first handed to the failing instance, which answers the requests it holds.
type stoppedMailbox struct {
	actor.Mailbox
	l *life
}

func (m *stoppedMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(&stoppedInvoker{MessageInvoker: invoker, l: m.l}, dispatcher)
}

// stoppedInvoker reads l.stopped on the mailbox's run, one message at a time with the
// scheduler's own messages (which set it): no lock needed.
type stoppedInvoker struct {
	actor.MessageInvoker
	l *life
}

func (i *stoppedInvoker) InvokeUserMessage(msg any) {
	if i.l.stopped {
		i.l.sys.DeadLetter.SendUserMessage(i.l.self, msg)
		return
	}
	i.MessageInvoker.InvokeUserMessage(msg)
}

// EscalateFailure answers the failed instance's requests, then escalates (protoactor's
// supervision restarts the actor, or stops it after repeated failures).
func (i *stoppedInvoker) EscalateFailure(reason, msg any) {
	if s := i.l.current; s != nil {
		s.fail(reason, msg)
	}
	i.MessageInvoker.EscalateFailure(reason, msg)
}

// fail answers every request s holds with ReasonSchedulerFailed after a panic in msg.
// s is discarded afterwards: its other state does not matter.
func (s *Scheduler) fail(reason, msg any) {
	if s.deps.Logger != nil {
		s.deps.Logger.Error("scheduler_failed", "routing_key", s.target.RoutingKey, "model", s.target.Model,
			"message", fmt.Sprintf("%T", msg), "panic", fmt.Sprint(reason), "stack", string(debug.Stack()))
	}
	if s.alarm != nil {
		s.alarm.Stop()
	}
	if s.trying != nil && !s.trying.parked {
		s.failOne(s.trying) // the request being routed (the failing Route's, or a parked one's)
	}
	s.trying = nil
	for _, p := range s.batch {
		if !p.parked {
			s.failOne(p)
		}
	}
	s.batch = nil
	for len(s.parked) > 0 {
		e := heap.Pop(&s.parked).(parkedEntry)
		if e.p.parked {
			e.p.parked = false
			s.parkedCount--
			s.deps.Observer.Parked(s.target, -1)
			s.failOne(e.p)
		}
	}
	for _, p := range s.held {
		s.failOne(p)
	}
	s.held = nil
}

// failOne answers p with ReasonSchedulerFailed unless its mailbox is full (answered
// already): the failed instance must not block on it.
func (s *Scheduler) failOne(p *Pending) {
	s.deps.Observer.Rejected(s.target, ReasonSchedulerFailed)
	select {
	case p.Mailbox <- Outcome{Kind: OutcomeRejected, Reason: ReasonSchedulerFailed}:
	default:
	}
}

// restored carries a restarted scheduler's backends' current views, for the incarnation
// that asked (a later one ignores them: it asked for its own).
type restored struct {
	views       []BackendView
	incarnation int
}

// restore asks for the backends' views of s's target off the actor (the view source
// talks to the backend actors, which may be waiting for this scheduler) and sends them
// back as restored.
func (s *Scheduler) restore(c actor.Context) {
	src, root, self, t, n := s.life.dir.views(), c.ActorSystem().Root, c.Self(), s.target, s.life.incarnations
	s.life.dir.goRestore(func() {
		root.Send(self, restored{views: src(t), incarnation: n})
	})
}

// applyRestored takes the views in and routes the requests held meanwhile.
func (s *Scheduler) applyRestored(c actor.Context, m restored) {
	if !s.restoring || m.incarnation != s.life.incarnations {
		return
	}
	for i := range m.views {
		s.applyView(&m.views[i])
	}
	s.restoring = false
	held := s.held
	s.held = nil
	for i, p := range held {
		s.batch = held[i+1:] // answered by a failure, like a re-evaluation's
		s.route(p)
	}
	s.batch = nil
	s.changed(c)
}

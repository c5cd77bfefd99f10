package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// NewSystem returns a protoactor system that logs through logger (protoactor's own
// messages, such as recovered panics and dead letters, included).
func NewSystem(logger *slog.Logger) *actor.ActorSystem {
	l := logger.With("component", "actors")
	return actor.NewActorSystem(func(c *actor.Config) {
		c.LoggerFactory = func(*actor.ActorSystem) *slog.Logger { return l }
	})
}

// Tick is the message an Alarm delivers.
type Tick struct{}

// Alarm keeps at most one runtime timer that delivers Tick to an actor at the earliest
// armed deadline. The owning actor calls Arm with each new deadline and Fired when it
// receives the Tick; after Fired it re-arms for its next deadline. Not safe for concurrent
// use: only the owning actor touches it.
type Alarm struct {
	deliver func()
	timer   *time.Timer
	at      time.Time
	armed   bool
}

// NewAlarm returns an alarm that sends Tick to pid from sender.
func NewAlarm(sender actor.SenderContext, pid *actor.PID) *Alarm {
	return &Alarm{deliver: func() { sender.Send(pid, Tick{}) }}
}

// Arm makes sure a Tick arrives no later than at; an earlier pending deadline is kept.
// now is the owner's current time.
func (a *Alarm) Arm(now, at time.Time) {
	if a.armed && !at.Before(a.at) {
		return
	}
	d := max(at.Sub(now), 0)
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.deliver)
	} else {
		a.timer.Stop()
		a.timer.Reset(d)
	}
	a.at, a.armed = at, true
}

// Fired records that the pending Tick arrived; the next Arm starts a new timer cycle.
func (a *Alarm) Fired() { a.armed = false }

// Armed reports the pending deadline, if any.
func (a *Alarm) Armed() (time.Time, bool) { return a.at, a.armed }

// Stop cancels the pending Tick.
func (a *Alarm) Stop() {
	if a.timer != nil {
		a.timer.Stop()
	}
	a.armed = false
}

// Every calls f every d until ctx is done; the first call is d from now.
func Every(ctx context.Context, d time.Duration, f func()) { EveryOrKicked(ctx, d, nil, f) }

// EveryOrKicked is Every that also calls f whenever kick delivers (nil: never), without
// moving the period's ticks.
func EveryOrKicked(ctx context.Context, d time.Duration, kick <-chan struct{}, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		f()
	}
}

package pylon

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/stats"
)

// sweepInterval is the period of the staleness sweep (REFERENCE.md §4.4).
const sweepInterval = time.Second

type phaseCount struct{ requests, tokens uint64 }

// genSnapshot is the immutable view a generation actor publishes after every change; the
// data path (x-pylon-load), the registrars and the metrics read it without messages.
type genSnapshot struct {
	generation uint64
	load       load.Load
	phases     [3]phaseCount
}

// generation is the handle of one (model, generation) actor.
type generation struct {
	model string
	gen   uint64
	pid   *actor.PID
	snap  atomic.Pointer[genSnapshot]
}

// modelEntry is one model id ever seen: its metrics and current generation (nil while
// no generation is admitted).
type modelEntry struct {
	name    string
	cur     atomic.Pointer[generation]
	metrics *modelMetrics
}

// genActor owns one generation's aggregate (DESIGN.md §3). Every message is applied to the
// pure stats.Aggregate, then the snapshot is republished and the registrars are told.
type genActor struct {
	g        *generation
	agg      *stats.Aggregate
	adm      admission.Config
	now      func() time.Time
	onChange func()
	alarm    *actors.Alarm
	retired  bool
	retireAt time.Time
}

func (a *genActor) Receive(c actor.Context) {
	now := a.now()
	changed := true
	switch m := c.Message().(type) {
	case *actor.Started:
		a.alarm = actors.NewAlarm(c.ActorSystem().Root, c.Self())
		a.alarm.Arm(now, now.Add(sweepInterval))
	case *actor.Stopping:
		a.alarm.Stop()
		changed = false
	case *requestAdmitted:
		if a.retired {
			m.reply <- admitReply{unavailable: true}
			return
		}
		d := a.agg.Admit(m.id, m.priority, m.inputTokens, m.expectedMs, m.hasExpected, a.adm, now)
		changed = d.Admit()
		if changed {
			a.publish(now)
		}
		m.reply <- admitReply{decision: d}
		if changed {
			a.onChange()
		}
		return
	case *responseStarted:
		a.agg.ResponseStarted(m.id)
	case *firstOutput:
		a.agg.FirstOutput(m.id, m.at)
	case *finished:
		a.agg.Finish(m.id, m.outputTokens, m.decode, m.at)
	case *updated:
		changed = a.agg.Apply(&m.update, now)
	case *retire:
		a.retired, a.retireAt = true, now.Add(RetireGrace)
		a.alarm.Arm(now, a.retireAt)
	case actors.Tick:
		a.alarm.Fired()
		if a.retired && !now.Before(a.retireAt) {
			c.Stop(c.Self())
			return
		}
		changed = a.agg.Sweep(now)
		a.alarm.Arm(now, now.Add(sweepInterval))
	default:
		changed = false
	}
	if changed && !a.retired {
		a.publish(now)
		a.onChange()
	}
}

func (a *genActor) publish(now time.Time) {
	s := &genSnapshot{generation: a.g.gen, load: a.agg.Load(now)}
	for i, ph := range stats.Phases {
		s.phases[i].requests, s.phases[i].tokens = a.agg.PhaseCounts(ph)
	}
	a.g.snap.Store(s)
}

// Messages of the generation actor (immutable once sent).
type (
	requestAdmitted struct {
		id          string
		priority    uint32
		inputTokens uint64
		expectedMs  uint64
		hasExpected bool
		reply       chan admitReply
	}
	admitReply struct {
		decision    admission.Decision
		unavailable bool
	}
	responseStarted struct{ id string }
	firstOutput     struct {
		id string
		at time.Time
	}
	finished struct {
		id           string
		at           time.Time
		outputTokens uint64
		decode       time.Duration
	}
	updated struct{ update stats.Update }
	retire  struct{}
)

package pylon

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/stats"
)

// A generation actor that panics (a bug) fails like this:
//
//   - At once, on the goroutine that ran the failing message: the caller waiting on that
//     message is answered (an admission gets 503 problem+json, reason
//     model_generation_unavailable, retryable). The actor never holds a request beyond
//     the message that carries it (Receive never blocks, nothing is parked), so no other
//     caller is waiting on the failed instance. Messages already queued behind the
//     failing one are processed, in order, by the restarted instance, at once: the
//     restart happens on the same goroutine before the next message.
//   - protoactor's supervision restarts the actor (same pid: the handlers and engine
//     loops keep reaching it) with a new genActor and a new aggregate: nothing of the
//     failed instance survives. The new aggregate is built from the generation's
//     current sources: the configuration (--max-engine-concurrency, --initial-input-tps),
//     the engine's last reports kept outside the actor (max_engine_concurrency ping, KV
//     figures, the last metrics scrape while younger than stats.EngineViewTTL), and the
//     input throughput last published (a consistent value, or --initial-input-tps
//     without one). It tracks no request: the requests the failed instance admitted run
//     on at the engine untouched, but their later milestones name ids the new aggregate
//     does not know and change nothing, so until they end the published load counts only
//     what the engine's own figures (a metrics scrape) show of them. The new instance
//     publishes its snapshot at once and tells the registrars. Retirement survives a
//     restart (it is kept here, not in the instance).
//   - More than 10 failures within 10 s (protoactor's default supervision) stop the
//     actor for good: its callers are answered unavailable (503, retryable) at once, and
//     the model gets a new generation (a new generation number, the same sources) in the
//     stopped one's place, so the model keeps being served.

// genLife is what one generation's actor keeps across its incarnations. The actor's
// mailbox run is the only goroutine using current, incarnations, failures, retired and
// retireAt (one message at a time).
type genLife struct {
	g        *generation
	opts     stats.Options
	adm      admission.Config
	now      func() time.Time
	onChange func()
	log      *slog.Logger
	// fault, when set, sees every message before the instance handles it (tests inject
	// panics with it); shared by every generation of a pylon.
	fault *atomic.Pointer[faultHook]
	// replace is called once the actor stopped for good after failures (nil: never).
	replace func(*generation)

	current      *genActor
	incarnations int
	failures     int
	retired      bool
	retireAt     time.Time
}

// faultHook is a test-only hook run on every generation message (model, message).
type faultHook func(model string, msg any)

// engineSources are the engine's last reports for a generation, kept outside the actor
// so that a new incarnation starts from them (values: nothing aliases the engine loops).
type engineSources struct {
	conc      stats.ConcurrencyReport
	hasConc   bool
	kv        stats.KVStats
	hasKV     bool
	metrics   stats.EngineMetrics
	metricsAt time.Time // zero: no scrape
}

// remember keeps u's engine reports (not the per-request stats events, which only a live
// aggregate can use) as g's current sources.
func (g *generation) remember(u *stats.Update, now func() time.Time) {
	if u.Concurrency == nil && u.KV == nil && u.Metrics == nil {
		return
	}
	g.srcMu.Lock()
	if u.Concurrency != nil {
		g.src.conc, g.src.hasConc = *u.Concurrency, true
	}
	if u.KV != nil {
		g.src.kv, g.src.hasKV = *u.KV, true
	}
	if u.Metrics != nil {
		g.src.metrics, g.src.metricsAt = *u.Metrics, now()
	}
	g.srcMu.Unlock()
}

func (g *generation) sources() engineSources {
	g.srcMu.Lock()
	defer g.srcMu.Unlock()
	return g.src
}

// props returns the actor props of l's generation: every incarnation is a new instance,
// on the inline mailbox (see genActor).
func (l *genLife) props() *actor.Props {
	return actors.InlineProps(l.incarnate)
}

// incarnate makes the generation's next instance, always a new one with a fresh aggregate
// (see the top of this file), and publishes its first snapshot before it runs.
func (l *genLife) incarnate() actor.Actor {
	now := l.now()
	a := &genActor{g: l.g, life: l, agg: l.freshAggregate(now), adm: l.adm, now: l.now, onChange: l.onChange}
	l.current = a
	l.incarnations++
	a.publish(now) // the first registration already carries the fallback concurrency
	if l.incarnations > 1 {
		l.log.Warn("model_generation_restarted", "model", l.g.model, "generation", l.g.gen, "incarnation", l.incarnations)
		if !l.retired {
			l.onChange()
		}
	}
	return a
}

// freshAggregate builds a new aggregate from the generation's current sources. Should
// applying them panic (a report that trips a bug), the aggregate starts from the
// configuration alone: a restart must not fail on the data it restarts from.
func (l *genLife) freshAggregate(now time.Time) *stats.Aggregate {
	g := l.g
	o := l.opts
	if !o.PinInputTPS {
		var s genSnapshot
		if ok, _ := g.published(&s); ok && load.ValidTPS(s.load.InputTPS) {
			o.InitialInputTPS = s.load.InputTPS // learned or calibrated before the failure
		}
	}
	agg := stats.NewAggregate(g.model, g.gen, o)
	src := g.sources()
	u := stats.Update{Generation: g.gen}
	if src.hasConc {
		u.Concurrency = &src.conc
	}
	if src.hasKV {
		u.KV = &src.kv
	}
	if !src.metricsAt.IsZero() && now.Sub(src.metricsAt) < stats.EngineViewTTL {
		u.Metrics = &src.metrics
	}
	if err := applySafely(agg, &u, now); err != nil {
		l.log.Error("model_generation_sources_dropped", "model", g.model, "generation", g.gen, "err", err)
		return stats.NewAggregate(g.model, g.gen, l.opts)
	}
	return agg
}

// applySafely applies u to agg, turning a panic into an error.
func applySafely(agg *stats.Aggregate, u *stats.Update, now time.Time) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("applying the engine's last reports panicked: %v", r)
		}
	}()
	agg.Apply(u, now)
	return nil
}

// fail answers the caller of msg, on which the instance panicked with reason, stops its
// alarm and logs the failure. The instance is discarded afterwards.
func (a *genActor) fail(msg, reason any) {
	l := a.life
	l.failures++
	if m, ok := msg.(interface{ replyTo() chan reply }); ok {
		select {
		case m.replyTo() <- reply{unavailable: true, failed: true}:
		default: // already answered
		}
	}
	a.releaseAllHolds() // the next instance starts with a new aggregate, holding nothing
	if a.alarm != nil {
		a.alarm.Stop()
	}
	l.log.Error("model_generation_failed", "model", l.g.model, "generation", l.g.gen, "message", fmt.Sprintf("%T", msg),
		"panic", fmt.Sprint(reason), "stack", string(debug.Stack()))
}

// stopped ends the generation (its callers give up) and, when it stopped for good after
// failures rather than by a retirement or a deliberate stop, has it replaced.
func (l *genLife) stopped() {
	close(l.g.done)
	if l.failures > 0 && !l.retired && !l.g.stopping.Load() && l.replace != nil {
		l.log.Error("model_generation_stopped", "model", l.g.model, "generation", l.g.gen, "failures", l.failures)
		l.replace(l.g)
	}
}

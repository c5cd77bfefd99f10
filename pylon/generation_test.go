package pylon

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/stats"
)

// genRig is one generation actor in its own actor system.
type genRig struct {
	root    *actor.RootContext
	g       *generation
	faults  atomic.Pointer[faultHook]
	changes atomic.Int32
}

func newGenRig(t *testing.T) (*genRig, func()) {
	t.Helper()
	sys := actors.NewSystem(slog.New(slog.DiscardHandler))
	r := &genRig{root: sys.Root, g: &generation{model: "m", gen: 1, done: make(chan struct{}), replies: newReplyPool()}}
	r.g.life = &genLife{
		g: r.g, opts: stats.Options{FallbackConcurrency: 4, InitialInputTPS: 1000},
		adm: admission.Config{Enabled: true, MinDeltaMs: 25, Tolerance: 1.25}, now: time.Now,
		onChange: func() { r.changes.Add(1) }, log: slog.New(slog.DiscardHandler), fault: &r.faults,
	}
	r.g.pid = sys.Root.Spawn(r.g.life.props())
	return r, func() {
		r.g.stopping.Store(true)
		_ = sys.Root.StopFuture(r.g.pid).Wait() // a no-op when already stopped
		<-r.g.done
		sys.Shutdown()
		time.Sleep(time.Minute)
	}
}

func TestGenerationSnapshotIsLazyAndIncludesTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, stop := newGenRig(t)
		defer stop()
		root := r.root
		call := func(m any, ch chan reply) reply {
			t.Helper()
			got, ok := r.g.call(root, m, ch)
			if !ok {
				t.Fatal("the actor stopped")
			}
			return got
		}
		ch := make(chan reply, 1)
		if got := call(&requestAdmitted{id: "a", inputTokens: 100, reply: ch}, ch); !got.decision.Admit() || got.unavailable {
			t.Fatalf("admission: %+v", got)
		}
		// Admitted: the aggregate changed, the snapshot is not rebuilt until someone reads it.
		published := func() genSnapshot {
			var s genSnapshot
			r.g.published(&s)
			return s
		}
		if !r.g.dirty.Load() || published().load.RunningRequests != 0 || r.changes.Load() != 1 {
			t.Fatalf("after admission: dirty %v, published running %d, changes %d", r.g.dirty.Load(), published().load.RunningRequests, r.changes.Load())
		}
		if s := r.g.snapshot(root); s.load.RunningRequests != 1 || s.load.QueuedInputTokens != 100 || r.g.dirty.Load() {
			t.Fatalf("snapshot on demand: %+v dirty %v", s.load, r.g.dirty.Load())
		}
		var scratch genSnapshot
		_, before := r.g.published(&scratch)
		if s := r.g.snapshot(root); s.build != before {
			t.Errorf("a clean snapshot was rebuilt: build %d, was %d", s.build, before)
		}
		if _, after := r.g.published(&scratch); after != before {
			t.Error("a clean snapshot was rebuilt")
		}
		// Headers: acknowledged after the snapshot shows the request in input processing.
		call(&responseStarted{id: "a", reply: ch}, ch)
		if s := published(); s.phases[stats.InputProcessing].requests != 1 || r.g.dirty.Load() {
			t.Errorf("after headers: phases %+v dirty %v", s.phases, r.g.dirty.Load())
		}
		// Streaming milestones without a reader only mark the snapshot dirty.
		root.Send(r.g.pid, &firstOutput{id: "a", at: time.Now()})
		root.Send(r.g.pid, &finished{id: "a", at: time.Now().Add(time.Second), outputTokens: 3, decode: time.Second})
		synctest.Wait()
		if !r.g.dirty.Load() || published().load.RunningRequests != 1 {
			t.Errorf("after finish: dirty %v, published running %d", r.g.dirty.Load(), published().load.RunningRequests)
		}
		if s := r.g.snapshot(root); s.load.RunningRequests != 0 || s.build != before+2 {
			t.Errorf("snapshot after finish: %+v, build %d, want %d (one per rebuild)", s.load, s.build, before+2)
		}
		// A buffered response: one acknowledged message, the snapshot shows it finished.
		call(&requestAdmitted{id: "b", inputTokens: 10, reply: ch}, ch)
		call(&completed{id: "b", at: time.Now(), outputTokens: 1, output: true, reply: ch}, ch)
		if s := published(); s.load.RunningRequests != 0 || r.g.dirty.Load() {
			t.Errorf("after completed: %+v dirty %v", s.load, r.g.dirty.Load())
		}
	})
}

func TestGenerationCallAfterStopReturnsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, stop := newGenRig(t)
		defer stop()
		_ = r.root.StopFuture(r.g.pid).Wait()
		<-r.g.done
		ch := make(chan reply, 1)
		root := r.root
		got, ok := r.g.call(root, &requestAdmitted{id: "late", reply: ch}, ch)
		if ok || !got.unavailable {
			t.Errorf("call to a stopped generation: %+v ok %v, want unavailable", got, ok)
		}
		r.g.dirty.Store(true)
		if s := r.g.snapshot(root); s == nil {
			t.Error("snapshot of a stopped generation: nil, want the last one")
		}
	})
}

// A copied snapshot owns its queue estimates: the actor rebuilds its own in place.
func TestSnapshotCopyDoesNotAliasTheActorsEstimates(t *testing.T) {
	g := &generation{}
	g.cur.pq[0], g.cur.pq[1] = load.PriorityEstimate{Priority: 0, QueueMs: 5}, load.PriorityEstimate{Priority: 4, QueueMs: 9}
	g.cur.load.QueueEstimates = g.cur.pq[:2]
	g.have = true
	var dst genSnapshot
	if ok, _ := g.published(&dst); !ok {
		t.Fatal("no snapshot")
	}
	g.cur.pq[0].QueueMs = 500 // the next rebuild
	if got := dst.load.QueueEstimates; len(got) != 2 || got[0].QueueMs != 5 || got[1].QueueMs != 9 {
		t.Errorf("copy changed with the actor's rebuild: %+v", got)
	}
	g.cur.load.QueueEstimates = g.cur.pq[:0] // explicit empty map stays explicit
	g.published(&dst)
	if dst.load.QueueEstimates == nil || len(dst.load.QueueEstimates) != 0 {
		t.Errorf("explicit empty map copied as %#v", dst.load.QueueEstimates)
	}
}

// A gateway holds a generation's state once an x-pylon-load of the current build reached
// it and nothing changed since; other gateways do not; the time of the last delivery is
// kept.
func TestDeliveredTo(t *testing.T) {
	g := &generation{model: "m", gen: 1, have: true, builds: 3}
	var gws gatewayTable
	g1, g2 := gws.add("g1", 0), gws.add("g2", 0)
	g1.note(7)
	if held, at := g.deliveredTo(g1); held || at != 0 {
		t.Fatal("delivered before any response")
	}
	now := time.Unix(100, 0)
	v, ok := g.appendLoadReport(nil, nil, g1, now)
	if !ok {
		t.Fatal("no report")
	}
	if r, err := wire.ParseLoadReport(string(v)); err != nil || r.DispatchSeq != 7 {
		t.Errorf("report %q echoes seq %d (%v), want 7", v, r.DispatchSeq, err)
	}
	if held, at := g.deliveredTo(g1); !held || at != now.UnixNano() {
		t.Errorf("after a response to g1: held %v at %d", held, at)
	}
	if held, _ := g.deliveredTo(g2); held {
		t.Error("g2 holds what went to g1")
	}
	g.dirty.Store(true) // a change not yet built
	if held, at := g.deliveredTo(g1); held || at != now.UnixNano() {
		t.Errorf("a pending change: held %v at %d", held, at)
	}
	g.dirty.Store(false)
	g.builds++ // rebuilt after a change
	if held, _ := g.deliveredTo(g1); held {
		t.Error("a newer build counted as delivered")
	}
}

// The deliveries of gateways gone from the gateway table go once as many gateways as it
// holds have had one: the map does not grow with every gateway that ever dispatched.
func TestDeliveriesOfDepartedGatewaysAreDropped(t *testing.T) {
	g := &generation{model: "m", gen: 1, have: true, builds: 1}
	t0 := time.Unix(1000, 0)
	for i := range maxGateways {
		g.appendLoadReport(nil, nil, &gatewayState{id: "old"}, t0.Add(time.Duration(i)*time.Millisecond))
	}
	recent := &gatewayState{id: "recent"}
	later := t0.Add(gatewayIdle)
	g.appendLoadReport(nil, nil, recent, later) // over the bound, nothing idle long enough yet: kept
	if got := len(g.delivered); got != maxGateways+1 {
		t.Fatalf("%d deliveries, want %d: none was old enough to go", got, maxGateways+1)
	}
	g.appendLoadReport(nil, nil, &gatewayState{id: "new"}, later.Add(time.Second))
	if got := len(g.delivered); got != 2 {
		t.Fatalf("%d deliveries after the old ones aged past gatewayIdle, want 2", got)
	}
	if _, at := g.deliveredTo(recent); at != later.UnixNano() {
		t.Errorf("a recent delivery was dropped (at %d)", at)
	}
}

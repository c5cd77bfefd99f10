package actors_test

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
)

// recorder is an actor that records its user messages (ints) and notices overlapping
// Receive calls; it sends itself 1000-n when it gets n < 0 (a re-entrant send).
type recorder struct {
	inside  atomic.Bool
	mu      sync.Mutex
	got     []int
	panics  int // panic on the message equal to panicOn, this many times
	panicOn int
	overlap atomic.Bool
}

type msg struct {
	n int
}

func (r *recorder) Receive(c actor.Context) {
	if !r.inside.CompareAndSwap(false, true) {
		r.overlap.Store(true)
	}
	defer r.inside.Store(false)
	m, ok := c.Message().(*msg)
	if !ok {
		return
	}
	if m.n == r.panicOn && r.panics > 0 {
		r.panics--
		panic("boom")
	}
	r.mu.Lock()
	r.got = append(r.got, m.n)
	r.mu.Unlock()
	if m.n < 0 {
		c.Send(c.Self(), &msg{n: -m.n + 1000})
	}
}

func (r *recorder) messages() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.got...)
}

func quietSystem() *actor.ActorSystem { return actors.NewSystem(slog.New(slog.DiscardHandler)) }

// An idle actor runs a message on the sender's goroutine before Send returns; a message it
// sends itself while running is queued and runs after the current one, still before the
// outer Send returns.
func TestInlineMailboxRunsIdleActorOnTheSender(t *testing.T) {
	sys := quietSystem()
	r := &recorder{panicOn: 1 << 30}
	pid := sys.Root.Spawn(actors.InlineProps(func() actor.Actor { return r }))
	defer func() { _ = sys.Root.StopFuture(pid).Wait() }()
	sys.Root.Send(pid, &msg{n: 1})
	if got := r.messages(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("after Send returned the actor had %v, want [1]", got)
	}
	sys.Root.Send(pid, &msg{n: -2})
	if got := r.messages(); len(got) != 3 || got[1] != -2 || got[2] != 1002 {
		t.Fatalf("re-entrant send: got %v, want [1 -2 1002]", got)
	}
}

// Many senders at once: every message is delivered exactly once, each sender's messages in
// the order sent, and Receive never runs twice at the same time.
func TestInlineMailboxConcurrentSendersKeepOrderAndExclusion(t *testing.T) {
	sys := quietSystem()
	r := &recorder{panicOn: 1 << 30}
	pid := sys.Root.Spawn(actors.InlineProps(func() actor.Actor { return r }))
	defer func() { _ = sys.Root.StopFuture(pid).Wait() }()
	const senders, each = 8, 2000
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				sys.Root.Send(pid, &msg{n: s*each + i})
			}
		}()
	}
	wg.Wait()
	// The last sender to find the actor running left its messages to the running
	// goroutine, which has drained them before going idle: a probe message from here runs
	// after all of them.
	sys.Root.Send(pid, &msg{n: -1 << 29})
	got := r.messages()
	if r.overlap.Load() {
		t.Fatal("Receive ran concurrently")
	}
	if len(got) != senders*each+2 {
		t.Fatalf("delivered %d messages, want %d", len(got), senders*each+2)
	}
	next := make([]int, senders)
	for _, n := range got[:senders*each] {
		s := n / each
		if n%each != next[s] {
			t.Fatalf("sender %d: got %d after %d", s, n%each, next[s]-1)
		}
		next[s]++
	}
}

// A panic is escalated to the supervisor: the actor restarts (its producer makes a fresh
// instance) and messages sent meanwhile are delivered to the new instance, none lost.
func TestInlineMailboxPanicRestartsTheActor(t *testing.T) {
	sys := quietSystem()
	var made atomic.Int32
	var current atomic.Pointer[recorder]
	pid := sys.Root.Spawn(actors.InlineProps(func() actor.Actor {
		made.Add(1)
		r := &recorder{panicOn: 7}
		if made.Load() == 1 {
			r.panics = 1
		}
		current.Store(r)
		return r
	}))
	defer func() { _ = sys.Root.StopFuture(pid).Wait() }()
	sys.Root.Send(pid, &msg{n: 1})
	sys.Root.Send(pid, &msg{n: 7}) // panics: restart
	sys.Root.Send(pid, &msg{n: 8})
	if made.Load() != 2 {
		t.Fatalf("producer called %d times, want 2 (one restart)", made.Load())
	}
	if got := current.Load().messages(); len(got) != 1 || got[0] != 8 {
		t.Fatalf("restarted actor got %v, want [8]", got)
	}
}

// Sending to an idle actor allocates nothing (the default mailbox allocates a closure per
// message to an idle actor).
func TestInlineMailboxSendAllocatesNothing(t *testing.T) {
	sys := quietSystem()
	r := &recorder{panicOn: 1 << 30, got: make([]int, 0, 1024)}
	pid := sys.Root.Spawn(actors.InlineProps(func() actor.Actor { return r }))
	defer func() { _ = sys.Root.StopFuture(pid).Wait() }()
	m := &msg{n: 3}
	if n := testing.AllocsPerRun(500, func() { sys.Root.Send(pid, m) }); n != 0 {
		t.Errorf("%.1f allocations per Send, want 0", n)
	}
}

// Stopping goes through the system queue: the actor gets Stopped and StopFuture returns.
func TestInlineMailboxStop(t *testing.T) {
	sys := quietSystem()
	stopped := make(chan struct{})
	pid := sys.Root.Spawn(actors.InlineProps(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if _, ok := c.Message().(*actor.Stopped); ok {
				close(stopped)
			}
		})
	}))
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	<-stopped
}

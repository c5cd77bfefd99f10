package actors_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/actors"
)

// The mailbox contract: the same behaviours, run against protoactor's default mailbox
// (actor.Unbounded, what props get without WithMailbox) and against ours. Where the two
// differ on purpose the test says so at the assertion, and doc.go lists the differences.

// mailboxUnderTest is one implementation of actor.Mailbox.
type mailboxUnderTest struct {
	name string
	make actor.MailboxProducer
	// inline: the mailbox never calls Dispatcher.Schedule; an idle mailbox runs a message
	// on the posting goroutine whatever the dispatcher (InlineMailbox, on purpose).
	inline bool
}

var mailboxesUnderTest = []mailboxUnderTest{
	{name: "protoactor_default", make: actor.Unbounded()},
	{name: "inline", make: actors.InlineMailbox, inline: true},
}

// boom is a message the fake invoker panics on, with reason "boom <name>".
type boom string

// sent is a user message of one sender in the concurrency behaviours.
type sent struct{ sender, seq int }

// failure is one EscalateFailure call.
type failure struct{ reason, msg any }

// fakeInvoker records what a mailbox delivers, in one log ("user x", "system x"), and
// notices two invocations at once. Hooks run inside an invocation, after it is logged.
type fakeInvoker struct {
	mu       sync.Mutex
	log      []string
	users    []any
	failures []failure

	busy    atomic.Bool
	overlap atomic.Bool

	onUser    func(msg any)
	onFailure func(reason, msg any)
}

func (f *fakeInvoker) enter() {
	if !f.busy.CompareAndSwap(false, true) {
		f.overlap.Store(true)
	}
}

func (f *fakeInvoker) record(kind string, msg any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, fmt.Sprint(kind, " ", msg))
	if kind == "user" {
		f.users = append(f.users, msg)
	}
}

func (f *fakeInvoker) InvokeSystemMessage(msg any) {
	f.enter()
	defer f.busy.Store(false)
	if b, ok := msg.(boom); ok {
		panic("boom " + string(b))
	}
	f.record("system", msg)
}

func (f *fakeInvoker) InvokeUserMessage(msg any) {
	f.enter()
	defer f.busy.Store(false)
	if b, ok := msg.(boom); ok {
		panic("boom " + string(b))
	}
	f.record("user", msg)
	if f.onUser != nil {
		f.onUser(msg)
	}
}

func (f *fakeInvoker) EscalateFailure(reason, msg any) {
	f.mu.Lock()
	f.failures = append(f.failures, failure{reason, msg})
	f.mu.Unlock()
	if f.onFailure != nil {
		f.onFailure(reason, msg)
	}
}

func (f *fakeInvoker) snapshot() (log []string, users []any, failures []failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log), slices.Clone(f.users), slices.Clone(f.failures)
}

// testDispatcher counts Schedule calls and either runs fn at once (protoactor's
// synchronized dispatcher) or holds it until run (a goroutine dispatcher whose goroutine
// the test starts by hand).
type testDispatcher struct {
	inline     bool
	throughput int

	mu        sync.Mutex
	held      []func()
	scheduled int
}

func (d *testDispatcher) Schedule(fn func()) {
	d.mu.Lock()
	d.scheduled++
	if !d.inline {
		d.held = append(d.held, fn)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	fn()
}

func (d *testDispatcher) Throughput() int { return d.throughput }

// run runs the held functions (and any they cause to be held) until none is left.
func (d *testDispatcher) run() {
	for {
		d.mu.Lock()
		if len(d.held) == 0 {
			d.mu.Unlock()
			return
		}
		fn := d.held[0]
		d.held = d.held[1:]
		d.mu.Unlock()
		fn()
	}
}

func (d *testDispatcher) schedules() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.scheduled
}

func synchronized() *testDispatcher { return &testDispatcher{inline: true, throughput: 300} }

func newMailbox(mb mailboxUnderTest, d actor.Dispatcher) (actor.Mailbox, *fakeInvoker) {
	f := &fakeInvoker{}
	m := mb.make()
	m.RegisterHandlers(f, d)
	m.Start()
	return m, f
}

func TestMailboxContract(t *testing.T) {
	t.Parallel()
	behaviours := []struct {
		name string
		run  func(t *testing.T, mb mailboxUnderTest)
	}{
		{"system_messages_before_queued_user_messages", systemBeforeUser},
		{"suspend_holds_user_messages_until_resume", suspendUntilResume},
		{"panic_is_escalated_and_the_mailbox_goes_on", panicEscalatesAndGoesOn},
		{"panic_escalation_that_suspends_holds_the_rest", panicEscalationSuspends},
		{"panic_in_a_system_message_is_escalated", systemPanicEscalates},
		{"synchronized_dispatcher_runs_before_post_returns", synchronizedRunsBeforeReturn},
		{"dispatcher_schedules_an_idle_mailbox_once", dispatcherSchedulesOnce},
		{"throughput_yields_without_giving_up_the_run", throughputKeepsTheRun},
		{"concurrent_posts_synchronized_dispatcher", func(t *testing.T, mb mailboxUnderTest) {
			t.Helper()
			concurrentPosts(t, mb, synchronized())
		}},
		{"concurrent_posts_deferred_dispatcher", func(t *testing.T, mb mailboxUnderTest) {
			t.Helper()
			concurrentPosts(t, mb, &testDispatcher{throughput: 7})
		}},
	}
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, mb := range mailboxesUnderTest {
				t.Run(mb.name, func(t *testing.T) {
					t.Parallel()
					b.run(t, mb)
				})
			}
		})
	}
}

// A system message posted while the mailbox is busy runs before the user messages queued
// ahead of it.
func systemBeforeUser(t *testing.T, mb mailboxUnderTest) {
	t.Helper()
	m, f := newMailbox(mb, synchronized())
	f.onUser = func(msg any) {
		if msg == "u1" {
			m.PostUserMessage("u2")
			m.PostUserMessage("u3")
			m.PostSystemMessage("s1")
			m.PostSystemMessage("s2")
		}
	}
	m.PostUserMessage("u1")
	log, _, _ := f.snapshot()
	want := []string{"user u1", "system s1", "system s2", "user u2", "user u3"}
	if diff := cmp.Diff(want, log); diff != "" {
		t.Errorf("delivery order (-want +got):\n%s", diff)
	}
}

// SuspendMailbox holds user messages back (queued and counted) while system messages
// still run; ResumeMailbox hands them over in order. Neither reaches the invoker.
func suspendUntilResume(t *testing.T, mb mailboxUnderTest) {
	t.Helper()
	m, f := newMailbox(mb, synchronized())
	m.PostUserMessage("u1")
	m.PostSystemMessage(&actor.SuspendMailbox{})
	m.PostUserMessage("u2")
	m.PostUserMessage("u3")
	m.PostSystemMessage("s1")
	log, _, _ := f.snapshot()
	if diff := cmp.Diff([]string{"user u1", "system s1"}, log); diff != "" {
		t.Errorf("suspended (-want +got):\n%s", diff)
	}
	if n := m.UserMessageCount(); n != 2 {
		t.Errorf("suspended: UserMessageCount %d, want 2", n)
	}
	m.PostSystemMessage(&actor.ResumeMailbox{})
	m.PostUserMessage("u4")
	log, _, _ = f.snapshot()
	want := []string{"user u1", "system s1", "user u2", "user u3", "user u4"}
	if diff := cmp.Diff(want, log); diff != "" {
		t.Errorf("resumed (-want +got):\n%s", diff)
	}
	if n := m.UserMessageCount(); n != 0 {
		t.Errorf("resumed: UserMessageCount %d, want 0", n)
	}
}

// A panicking user message is escalated with the panic value and the message; the
// mailbox itself goes on with the messages queued behind it (with protoactor's actor
// context, the invoker suspends it: the next behaviour).
func panicEscalatesAndGoesOn(t *testing.T, mb mailboxUnderTest) {
	t.Helper()
	m, f := newMailbox(mb, synchronized())
	f.onUser = func(msg any) {
		if msg == "u1" {
			m.PostUserMessage(boom("u2"))
			m.PostUserMessage("u3")
		}
	}
	m.PostUserMessage("u1")
	m.PostUserMessage(boom("u4")) // idle again: the panic is on the posting goroutine's run
	m.PostUserMessage("u5")
	_, users, failures := f.snapshot()
	if diff := cmp.Diff([]any{"u1", "u3", "u5"}, users); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	wantFailures := []failure{{"boom u2", boom("u2")}, {"boom u4", boom("u4")}}
	if diff := cmp.Diff(wantFailures, failures, cmp.AllowUnexported(failure{})); diff != "" {
		t.Errorf("escalated (-want +got):\n%s", diff)
	}
	if f.overlap.Load() {
		t.Error("invocations overlapped")
	}
}

// protoactor's actor context answers EscalateFailure by posting SuspendMailbox to its own
// mailbox (and Failure to its supervisor, which restarts the actor and resumes it): the
// messages queued behind the panicking one wait for ResumeMailbox, system messages do not.
func panicEscalationSuspends(t *testing.T, mb mailboxUnderTest) {
	t.Helper()
	m, f := newMailbox(mb, synchronized())
	f.onFailure = func(_, _ any) { m.PostSystemMessage(&actor.SuspendMailbox{}) }
	f.onUser = func(msg any) {
		if msg == "u1" {
			m.PostUserMessage(boom("u2"))
			m.PostUserMessage("u3")
		}
	}
	m.PostUserMessage("u1")
	m.PostUserMessage("u4")
	m.PostSystemMessage("restart")
	log, _, failures := f.snapshot()
	if diff := cmp.Diff([]string{"user u1", "system restart"}, log); diff != "" {
		t.Errorf("after the panic (-want +got):\n%s", diff)
	}
	if len(failures) != 1 || failures[0].msg != boom("u2") {
		t.Errorf("escalated %v, want one failure for u2", failures)
	}
	if n := m.UserMessageCount(); n != 2 {
		t.Errorf("UserMessageCount %d, want 2 held", n)
	}
	m.PostSystemMessage(&actor.ResumeMailbox{})
	log, _, _ = f.snapshot()
	want := []string{"user u1", "system restart", "user u3", "user u4"}
	if diff := cmp.Diff(want, log); diff != "" {
		t.Errorf("resumed (-want +got):\n%s", diff)
	}
}

// A panic in a system message is escalated the same way; later messages still run.
func systemPanicEscalates(t *testing.T, mb mailboxUnderTest) {
	t.Helper()
	m, f := newMailbox(mb, synchronized())
	m.PostSystemMessage(boom("s1"))
	m.PostSystemMessage("s2")
	m.PostUserMessage("u1")
	log, _, failures := f.snapshot()
	if diff := cmp.Diff([]string{"system s2", "user u1"}, log); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]failure{{"boom s1", boom("s1")}}, failures, cmp.AllowUnexported(failure{})); diff != "" {
		t.Errorf("escalated (-want +got):\n%s", diff)
	}
}

// With protoactor's synchronized dispatcher, Post on an idle mailbox runs it on the
// posting goroutine: the message, and whatever the invoker posts meanwhile, are delivered
// before Post returns.
func synchronizedRunsBeforeReturn(t *testing.T, mb mailboxUnderTest) {
	t.Helper()
	m, f := newMailbox(mb, synchronized())
	f.onUser = func(msg any) {
		if msg == "u1" {
			m.PostUserMessage("self")
		}
	}
	m.PostUserMessage("u1")
	if _, users, _ := f.snapshot(); !slices.Equal(users, []any{"u1", "self"}) {
		t.Errorf("after Post returned: delivered %v, want [u1 self]", users)
	}
	m.PostUserMessage("u2")
	if _, users, _ := f.snapshot(); !slices.Equal(users, []any{"u1", "self", "u2"}) {
		t.Errorf("after the second Post: delivered %v", users)
	}
}

// protoactor's mailbox hands an idle mailbox's run to Dispatcher.Schedule once; messages
// posted before that run starts ride along. Deliberate difference: the inline mailbox
// never schedules, it runs an idle mailbox on the posting goroutine whatever the
// dispatcher (doc.go).
func dispatcherSchedulesOnce(t *testing.T, mb mailboxUnderTest) {
	t.Helper()
	d := &testDispatcher{throughput: 300}
	m, f := newMailbox(mb, d)
	m.PostUserMessage("u1")
	m.PostUserMessage("u2")
	_, users, _ := f.snapshot()
	if mb.inline {
		if d.schedules() != 0 || !slices.Equal(users, []any{"u1", "u2"}) {
			t.Fatalf("inline: %d schedules, delivered %v; want 0 and [u1 u2] before Post returns", d.schedules(), users)
		}
		return
	}
	if d.schedules() != 1 || len(users) != 0 || m.UserMessageCount() != 2 {
		t.Fatalf("before the dispatcher ran: %d schedules, delivered %v, %d queued; want 1, none, 2", d.schedules(), users, m.UserMessageCount())
	}
	d.run()
	m.PostUserMessage("u3") // idle again: scheduled anew
	d.run()
	if _, users, _ := f.snapshot(); d.schedules() != 2 || !slices.Equal(users, []any{"u1", "u2", "u3"}) {
		t.Errorf("after the runs: %d schedules, delivered %v; want 2, [u1 u2 u3]", d.schedules(), users)
	}
}

// Every Throughput messages a run yields the processor (runtime.Gosched, which no test
// can observe exactly) but keeps the mailbox: the whole backlog runs in the one run,
// without a new Schedule.
func throughputKeepsTheRun(t *testing.T, mb mailboxUnderTest) {
	t.Helper()
	d := &testDispatcher{inline: true, throughput: 1}
	m, f := newMailbox(mb, d)
	const backlog = 20
	f.onUser = func(msg any) {
		if msg == 0 {
			for i := 1; i <= backlog; i++ {
				m.PostUserMessage(i)
			}
		}
	}
	m.PostUserMessage(0)
	_, users, _ := f.snapshot()
	want := make([]any, 0, backlog+1)
	for i := range backlog + 1 {
		want = append(want, i)
	}
	if diff := cmp.Diff(want, users); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	wantSchedules := 1
	if mb.inline {
		wantSchedules = 0 // never schedules (dispatcherSchedulesOnce)
	}
	if got := d.schedules(); got != wantSchedules {
		t.Errorf("%d schedules, want %d", got, wantSchedules)
	}
}

// Messages posted from many goroutines at once are each delivered exactly once, one
// invocation at a time, each sender's in the order it posted them; system messages posted
// meanwhile too.
func concurrentPosts(t *testing.T, mb mailboxUnderTest, d *testDispatcher) {
	t.Helper()
	m, f := newMailbox(mb, d)
	const senders, each, systems = 6, 500, 200
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				m.PostUserMessage(sent{s, i})
			}
		})
	}
	wg.Go(func() {
		for i := range systems {
			m.PostSystemMessage(i)
		}
	})
	wg.Wait()
	d.run() // the deferred dispatcher: the run it holds, if any
	log, users, _ := f.snapshot()
	if f.overlap.Load() {
		t.Error("invocations overlapped")
	}
	if len(users) != senders*each || len(log)-len(users) != systems {
		t.Fatalf("delivered %d user and %d system messages, want %d and %d", len(users), len(log)-len(users), senders*each, systems)
	}
	next := make([]int, senders)
	for _, u := range users {
		s, ok := u.(sent)
		if !ok || s.seq != next[s.sender] {
			t.Fatalf("got %v, want sender %d's message %d next", u, s.sender, next[s.sender])
		}
		next[s.sender]++
	}
	wantSystem := 0
	for _, l := range log {
		if l == fmt.Sprint("system ", wantSystem) {
			wantSystem++
		}
	}
	if wantSystem != systems {
		t.Errorf("system messages out of order: %d of %d in sequence", wantSystem, systems)
	}
	if n := m.UserMessageCount(); n != 0 {
		t.Errorf("UserMessageCount %d after the drain, want 0", n)
	}
}

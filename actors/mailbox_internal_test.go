package actors

import (
	"slices"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// fakeInvoker records what the mailbox delivers; it panics on the user message "panic".
type fakeInvoker struct {
	user, system []any
	failures     []any
}

func (f *fakeInvoker) InvokeSystemMessage(m any) { f.system = append(f.system, m) }

func (f *fakeInvoker) InvokeUserMessage(m any) {
	if m == "panic" {
		panic("boom")
	}
	f.user = append(f.user, m)
}

func (f *fakeInvoker) EscalateFailure(_, m any) { f.failures = append(f.failures, m) }

// Suspended, the mailbox holds user messages back (system messages still run) and hands
// them over in order on resume.
func TestInlineMailboxSuspendHoldsUserMessages(t *testing.T) {
	f := &fakeInvoker{}
	m := InlineMailbox().(*inlineMailbox) //nolint:forcetypeassert // the constructor's own type
	m.RegisterHandlers(f, actor.NewSynchronizedDispatcher(300))
	m.PostUserMessage(1)
	m.PostSystemMessage(&actor.SuspendMailbox{})
	for i := 2; i <= 100; i++ {
		m.PostUserMessage(i)
	}
	m.PostSystemMessage("sys")
	if len(f.user) != 1 || m.UserMessageCount() != 99 || !slices.Equal(f.system, []any{"sys"}) {
		t.Fatalf("suspended: delivered %v, %d queued, system %v", f.user, m.UserMessageCount(), f.system)
	}
	m.PostSystemMessage(&actor.ResumeMailbox{})
	if len(f.user) != 100 || m.UserMessageCount() != 0 {
		t.Fatalf("resumed: delivered %d, %d queued", len(f.user), m.UserMessageCount())
	}
	for i, v := range f.user {
		if v != i+1 {
			t.Fatalf("order: %v", f.user)
		}
	}
	// The queue grown by the 99 held messages is released once drained.
	if m.user.buf != nil {
		t.Errorf("drained queue keeps %d slots", len(m.user.buf))
	}
}

// A panicking message is escalated with the message, and the mailbox goes on.
func TestInlineMailboxEscalatesPanics(t *testing.T) {
	f := &fakeInvoker{}
	m := InlineMailbox().(*inlineMailbox) //nolint:forcetypeassert // the constructor's own type
	m.RegisterHandlers(f, nil)
	m.PostUserMessage("panic")
	m.PostUserMessage("after")
	if !slices.Equal(f.failures, []any{"panic"}) || !slices.Equal(f.user, []any{"after"}) || m.running {
		t.Fatalf("failures %v, delivered %v, running %v", f.failures, f.user, m.running)
	}
}

// The ring keeps FIFO order across wrap-around and growth.
func TestDequeWrapsAndGrows(t *testing.T) {
	var q deque
	want := 0
	next := 0
	for round := range 50 {
		for range round % 13 {
			q.push(next)
			next++
		}
		for range round % 7 {
			if q.n == 0 {
				break
			}
			if v := q.pop(); v != want {
				t.Fatalf("popped %v, want %d", v, want)
			}
			want++
		}
	}
	for q.n > 0 {
		if v := q.pop(); v != want {
			t.Fatalf("popped %v, want %d", v, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("popped %d of %d", want, next)
	}
}

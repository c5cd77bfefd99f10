package actors

import (
	"runtime"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// InlineMailbox is a protoactor mailbox for actors on a request path (the gateway's
// schedulers and backends, the pylon's model generations). Like protoactor's default
// mailbox with the synchronized dispatcher, it runs an idle actor's messages on the
// sender's goroutine, one at a time and in order, and whichever goroutine is running the
// mailbox also runs the messages posted meanwhile. It is leaner on the path it serves:
//   - no allocation per message: the default mailbox hands the dispatcher a new method
//     value every time an idle actor gets a message (measured: 3 allocations per gateway
//     request), and its system queue allocates a node per message;
//   - a message to an idle actor with nothing queued is invoked directly, without a trip
//     through the queue;
//   - one mutex guards the queues and the running flag, held only to push, to pop, and to
//     go idle; an uncontended lock is a few atomic operations.
//
// Semantics kept from the default mailbox: system messages go first; SuspendMailbox holds
// user messages back until ResumeMailbox (supervision suspends a failed actor until it is
// restarted); a panic in a message is recovered and escalated to the supervisor
// (EscalateFailure), after which the mailbox goes on; runtime.Gosched every
// dispatcher.Throughput() messages in one run. Messages of one sender keep their order: a
// message is invoked directly only when the mailbox is idle and both queues are empty.
// Memory is bounded by the queued messages: a queue grown by a burst is released once it
// drains. mailbox_contract_test.go runs these behaviours against protoactor's default
// mailbox too; doc.go lists the deliberate differences.
//
// Not supported (none of our actors uses them): mailbox middlewares and protoactor's
// MessageBatch unpacking. As with the synchronized dispatcher, a sender that finds the
// actor idle also runs whatever other goroutines post while it is running, so under a
// burst one sender's Send can take a while; Receive must stay short.
//
// Use it with InlineProps or actor.WithMailbox(actors.InlineMailbox). The mailbox never
// schedules through the props' dispatcher; it only takes the dispatcher's throughput.
func InlineMailbox() actor.Mailbox { return &inlineMailbox{} }

// InlineProps returns props for the actor made by producer on an InlineMailbox (with
// protoactor's default throughput of 300 messages per run between yields).
func InlineProps(producer actor.Producer) *actor.Props {
	return actor.PropsFromProducer(producer, actor.WithMailbox(InlineMailbox))
}

const defaultThroughput = 300

type inlineMailbox struct {
	mu        sync.Mutex
	user      deque
	system    deque
	running   bool // a goroutine is running the mailbox
	suspended bool // user messages are held back (set and cleared by system messages)

	invoker    actor.MessageInvoker
	throughput int
}

func (m *inlineMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker = invoker
	m.throughput = defaultThroughput
	if dispatcher != nil && dispatcher.Throughput() > 0 {
		m.throughput = dispatcher.Throughput()
	}
}

func (m *inlineMailbox) Start() {}

func (m *inlineMailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.user.n
}

func (m *inlineMailbox) PostUserMessage(msg any) { m.post(msg, false) }

func (m *inlineMailbox) PostSystemMessage(msg any) { m.post(msg, true) }

// post queues msg, or runs the mailbox on this goroutine when it is idle. An idle mailbox
// has both queues empty but for user messages held back while it is suspended (run goes
// idle only then, and only run changes suspended), so msg goes first unless it is a user
// message of a suspended mailbox.
func (m *inlineMailbox) post(msg any, system bool) {
	m.mu.Lock()
	if !m.running && (system || !m.suspended) {
		m.running = true
		m.mu.Unlock()
		m.run(msg, system)
		return
	}
	if system {
		m.system.push(msg)
	} else {
		m.user.push(msg)
	}
	m.mu.Unlock()
}

// run processes first and then every queued message it may, and goes idle.
func (m *inlineMailbox) run(first any, system bool) {
	m.invoke(first, system)
	for i := 1; ; i++ {
		if i%m.throughput == 0 {
			runtime.Gosched()
		}
		m.mu.Lock()
		var msg any
		switch {
		case m.system.n > 0:
			msg, system = m.system.pop(), true
		case !m.suspended && m.user.n > 0:
			msg, system = m.user.pop(), false
		default:
			m.running = false
			m.user.release()
			m.system.release()
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		m.invoke(msg, system)
	}
}

// invoke delivers one message; a panic is escalated to the supervisor.
func (m *inlineMailbox) invoke(msg any, system bool) {
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	if !system {
		m.invoker.InvokeUserMessage(msg)
		return
	}
	switch msg.(type) {
	case *actor.SuspendMailbox:
		m.setSuspended(true)
	case *actor.ResumeMailbox:
		m.setSuspended(false)
	default:
		m.invoker.InvokeSystemMessage(msg)
	}
}

func (m *inlineMailbox) setSuspended(v bool) {
	m.mu.Lock()
	m.suspended = v
	m.mu.Unlock()
}

// deque is a growable ring of messages.
type deque struct {
	buf     []any
	head, n int
}

func (q *deque) push(v any) {
	if q.n == len(q.buf) {
		grown := make([]any, max(2*len(q.buf), 8))
		for i := range q.n {
			grown[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = v
	q.n++
}

func (q *deque) pop() any {
	v := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return v
}

// keptRing is the largest empty ring kept for reuse; a larger one (grown by a burst) is
// released when it drains.
const keptRing = 64

func (q *deque) release() {
	if q.n == 0 && len(q.buf) > keptRing {
		q.buf, q.head = nil, 0
	}
}

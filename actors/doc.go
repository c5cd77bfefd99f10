// Package actors is the shared actor kit: actor-system construction with our slog logger
// (NewSystem), the inline mailbox for actors on a request's path (InlineMailbox,
// InlineProps), a one-timer alarm for actors that keep their own deadline heap (Alarm), and
// a periodic loop for background work (Every). Nothing here is global: one system per
// component instance (and per test).
//
// # What protoactor still provides
//
// protoactor-go's actor package is the runtime: the ActorSystem with its process registry,
// PIDs, Props and Spawn; the actor Context (Receive, Send, Request and Respond, Self);
// lifecycle messages (Started, Stopping, Stopped, Restarting); stopping with StopFuture and
// PoisonFuture; RequestFuture; supervision (our actors are spawned from the root, so a
// panicking actor is restarted from its producer by the default one-for-one strategy, at
// most 10 times in 10 s); dead letters; and its logging, which NewSystem points at our
// logger. Actors off the request path (the pylon's registrars) also keep protoactor's
// default mailbox (actor.Unbounded) and dispatcher (a goroutine per run of the mailbox,
// yielding every 300 messages).
//
// # What InlineMailbox replaces, and why
//
// Actors on a request's path (the gateway's schedulers and backends, the pylon's model
// generations) use InlineMailbox instead of the default mailbox. The default mailbox hands
// every run of an idle mailbox to the dispatcher: with the default dispatcher that is a new
// goroutine and a goroutine switch on each request's path, and with either dispatcher it
// allocates a method value per run and a queue node per system message. InlineMailbox runs
// an idle actor's message on the sender's goroutine, with no allocation per message, and
// otherwise keeps the default mailbox's contract. mailbox_contract_test.go runs the same
// behaviours against both mailboxes:
//   - system messages run before queued user messages;
//   - SuspendMailbox holds user messages (queued, counted by UserMessageCount) until
//     ResumeMailbox while system messages still run; neither reaches the invoker;
//   - a panic in a user or a system message is recovered and passed to the invoker's
//     EscalateFailure with the panic value and the message, and the mailbox goes on with
//     what is queued; protoactor's actor context then suspends it (it posts SuspendMailbox
//     from EscalateFailure) until its supervisor has restarted the actor and resumed it;
//   - each sender's user messages arrive in the order sent, every message posted
//     concurrently arrives exactly once, and one message is invoked at a time;
//   - a run yields the processor (runtime.Gosched) every Throughput messages but keeps
//     the mailbox, so a backlog is drained by the run that found it.
//
// Deliberate differences, each noted at its assertion in the contract test:
//   - InlineMailbox never calls Dispatcher.Schedule. Whatever the props' dispatcher, an
//     idle mailbox runs on the goroutine that posts to it, so Send to an idle actor returns
//     after Receive ran (as with protoactor's synchronized dispatcher), and a sender that
//     finds the actor idle also runs what other goroutines post meanwhile: Receive must
//     stay short. The dispatcher only supplies the throughput.
//   - A dispatcher Throughput of 0, or no dispatcher, means protoactor's default of 300;
//     the default mailbox needs a dispatcher and yields after every message with 0.
//   - Mailbox middlewares (actor.MailboxMiddleware) and the unpacking of actor.MessageBatch
//     are not supported; none of our actors uses them.
//
// # Messages
//
// Actor messages are immutable values where they can be. Where a message is a pooled
// object or a pointer hand-off (on the per-request paths, to allocate nothing), its type's
// doc comment says who owns it and when it is recycled.
package actors

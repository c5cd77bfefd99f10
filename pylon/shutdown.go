package pylon

import (
	"context"
	"errors"
	"net"
	"time"
)

// Shutdown timing.
const (
	drainPoll = 10 * time.Millisecond
	// abortGrace bounds each wait after the drain deadline: for the handlers to finish once
	// their engine connections are closed, then once their client connections are closed.
	abortGrace = time.Second
)

// errHandlersAbandoned is returned by Run when handlers were still running after the
// abort; the actors were stopped regardless.
var errHandlersAbandoned = errors.New("pylon shutdown: handlers still running after the drain timeout and abort were abandoned")

// stopServing drains the data path within DrainTimeout, then stops it whatever is left:
//  1. draining: models INACTIVE, new requests get a retryable 503, in-flight ones continue;
//     when none is left (or at the deadline) the listener closes and idle connections are
//     closed (fasthttp's ShutdownWithContext, which waits for the open ones);
//  2. at the deadline, every engine connection is closed: a handler waiting for the
//     engine answers 503 and a relayed stream is cut;
//  3. after abortGrace, every client connection still open is closed (a client that does
//     not read, or is still sending its body);
//  4. after another abortGrace the remaining handlers are abandoned (logged, error).
//
// serveErr is Serve's result channel (nil when Serve has already returned).
func (p *Pylon) stopServing(serveErr <-chan error) error {
	p.draining.Store(true)
	p.structure.Add(1)
	p.publish() // models INACTIVE
	deadline := time.Now().Add(p.cfg.DrainTimeout)
	for p.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(drainPoll)
	}
	stopped := make(chan error, 1)
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.handoff.Close() // a handed-off connection waiting for its next request closes
	go func() { stopped <- p.server.ShutdownWithContext(sctx) }()
	// wait reports whether the server stopped within d, and its result.
	wait := func(d time.Duration) (bool, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case err := <-stopped:
			return true, err
		case <-t.C:
			select { // both ready: prefer the clean outcome
			case err := <-stopped:
				return true, err
			default:
				return false, nil
			}
		}
	}
	ok, err := wait(time.Until(deadline))
	if !ok {
		p.log.Warn("drain_timeout_aborting_engine_calls", "inflight", p.inflight.Load(), "engine_connections", p.engine.Abort())
		ok, err = wait(abortGrace)
	}
	if !ok {
		p.log.Warn("drain_timeout_closing_client_connections", "inflight", p.inflight.Load(), "connections", p.clients.closeAll())
		ok, err = wait(abortGrace)
	}
	if !ok {
		cancel()
		p.log.Error("drain_timeout_handlers_abandoned", "inflight", p.inflight.Load(), "err", <-stopped)
		err = errHandlersAbandoned
	}
	// The server's shutdown closes only the listener Serve has registered: a signal that
	// arrives before Serve got that far would leave it serving for ever.
	_ = p.ln.Close()
	if serveErr != nil {
		serr := <-serveErr
		if errors.Is(serr, net.ErrClosed) {
			serr = nil
		}
		err = errors.Join(err, serr)
	}
	return err
}

package gateway

import (
	"errors"
	"time"

	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/internal/relay"
)

// newUpstreamConns returns the watchdog of every pylon connection: the upstream headers
// timeout (--upstream-headers-timeout) bounds only the wait for the first bytes of an
// answer, with no timer per request; a stream then runs unbounded. fasthttp's DoTimeout
// would arm two runtime timers per request and leave its read deadline on the connection
// while a stream is relayed, cutting every stream longer than the timeout.
//
// Each attempt brings its own deadline (its first-byte deadline, see firstByteDeadline,
// at most the headers timeout; the health probes their probe timeout) through fasthttp's
// request timeout, which the connections keep as a watchdog tick (RequestDeadlines): the
// watchdog ticks at an eighth of the shortest deadline an attempt may get.
func (g *Gateway) newUpstreamConns() *relay.Conns {
	shortest := g.cfg.HeadersTimeout
	if g.cfg.FirstByteTimeoutFactor > 0 {
		shortest = min(shortest, g.cfg.FirstByteTimeoutFloor)
	}
	shortest = min(shortest, g.cfg.ProbeTimeout)
	w := relay.NewConns(g.deps.Dial, g.cfg.HeadersTimeout, 0, func(uint32) {}).
		RequestDeadlines(g.cfg.HeadersTimeout, 0, shortest)
	if g.cfg.NoRawSocketIO {
		w.PlainIO() // --raw-socket-io=false: net.Conn's own reads and writes
	}
	return w
}

// errHeadersTimeout and errFirstByteTimeout describe an attempt the watchdog ended.
var (
	errHeadersTimeout   = errors.New("the pylon sent no answer within --upstream-headers-timeout")
	errFirstByteTimeout = errors.New("the pylon sent no answer within the attempt's first-byte deadline")
	errAbandoned        = errors.New("the pylon stopped answering (its heartbeats or health probes); the attempt was given up")
)

// abandon gives up b's attempts still waiting for an answer (the fleet's OnUnresponsive:
// its heartbeats or its health probes stopped getting through). Their connections are
// closed, so each attempt fails over now, as a pylon_unresponsive retry (counted in
// upstream_abandoned_attempts_total by attempt), instead of waiting for a frozen or cut-off
// pylon until --upstream-headers-timeout. With stalled > 0 the streams b has sent nothing
// for that long are closed too: the client gets the stream's error event (stream.go)
// instead of a stream that never ends, since nothing bounds a stream's silence. It returns
// the connections closed.
func (g *Gateway) abandon(b *fleet.Backend, stalled time.Duration) int {
	return g.upstream.Abandon(b.Client.Addr, stalled)
}

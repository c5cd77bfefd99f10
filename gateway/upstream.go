package gateway

import (
	"errors"

	"github.com/switchyard/switchyard/pylon/relay"
)

// newUpstreamConns returns the watchdog of every pylon connection: the upstream headers
// timeout (REFERENCE.md §3.6) bounds only the wait for the first bytes of an answer, with
// no timer per request; a stream then runs unbounded. fasthttp's DoTimeout would arm two
// runtime timers per request and leave its read deadline on the connection while a stream
// is relayed, cutting every stream longer than the timeout.
func (g *Gateway) newUpstreamConns() *relay.Conns {
	return relay.NewConns(g.deps.Dial, g.cfg.HeadersTimeout, 0, func(uint32) {})
}

// errHeadersTimeout describes an attempt the watchdog ended.
var errHeadersTimeout = errors.New("the pylon sent no answer within --upstream-headers-timeout")

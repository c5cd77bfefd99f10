package pylon

import (
	"net"
	"sync"

	"github.com/valyala/fasthttp"
)

// clientConns tracks the data server's open connections (fasthttp's ConnState hook; no
// per-request work) so a shutdown past its drain timeout can close the ones still open: a
// handler writing to a client that does not read, or a client still sending its body.
type clientConns struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool
}

func newClientConns() *clientConns { return &clientConns{conns: map[net.Conn]struct{}{}} }

// state is the server's ConnState hook.
func (cc *clientConns) state(c net.Conn, s fasthttp.ConnState) {
	switch s { //nolint:exhaustive // only the start and the end of a connection matter
	case fasthttp.StateNew:
		cc.mu.Lock()
		closing := cc.closing
		if !closing {
			cc.conns[c] = struct{}{}
		}
		cc.mu.Unlock()
		if closing {
			_ = c.Close()
		}
	case fasthttp.StateClosed: // a hijacked connection stays until its hijacker closes it
		cc.mu.Lock()
		delete(cc.conns, c)
		cc.mu.Unlock()
	}
}

// closeAll closes every open connection (and any accepted later) and returns how many.
func (cc *clientConns) closeAll() int {
	cc.mu.Lock()
	cc.closing = true
	all := make([]net.Conn, 0, len(cc.conns))
	for c := range cc.conns {
		all = append(all, c)
	}
	cc.mu.Unlock()
	for _, c := range all {
		_ = c.Close()
	}
	return len(all)
}

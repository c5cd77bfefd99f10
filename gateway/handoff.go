package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/relay"
)

// Handing an event stream off the connection's serving goroutine.
//
// fasthttp serves a connection on one goroutine and would write a streamed answer there,
// through its own 4 KiB copy buffer and the connection's write buffer, with the goroutine's
// stack sized by the deepest point of routing the request. A stream may stay open for
// minutes, so all of that was held per open stream. Instead, handOver hijacks the
// connection (fasthttp writes nothing itself): the serving goroutine goes back to
// fasthttp's pool, and the stream is relayed on the hijack's goroutine, whose stack holds
// only the relay loop, through one 1 KiB chunk buffer (relayStream). The answer on the wire
// is the one fasthttp would have written: the same header block, chunked.
//
// When the stream has ended and the connection is to be kept alive, awaitNext waits for
// the client's next request (under the server's idle timeout) and gives the connection
// back to fasthttp (Server.ServeConn), so keep-alive clients see no difference. The
// connection stays counted against --max-connections throughout (httpserver's guard keeps
// hijacked connections), and a drain waits for handed-off streams as for any request
// (handoffs.close and wait).

// streamChunk is the largest piece of a stream relayed in one write. Events are smaller;
// a burst larger than this takes more than one write.
const streamChunk = 1 << 10

// chunkRoom is the room before a piece for its chunk-size line ("400\r\n" at most).
const chunkRoom = 5

// clientWriteTimeout bounds one write of a handed-off stream: a client that takes no byte
// of an event for this long is treated as gone (its stream ends, counted 499).
const clientWriteTimeout = 30 * time.Second

// lastChunk ends a chunked body (no trailers).
var lastChunk = []byte("0\r\n\r\n")

var chunkBufs = sync.Pool{New: func() any {
	b := make([]byte, chunkRoom+streamChunk+2)
	return &b
}}

// nextBufs hold the first bytes of a handed-off connection's next request until fasthttp
// reads them. At least as large as fasthttp's read buffer, so a read of the hijacked
// connection takes what fasthttp's reader buffered and nothing stays behind in it.
var nextBufs = sync.Pool{New: func() any {
	b := make([]byte, clientReadBuffer)
	return &b
}}

// upstreamResponse is where an attempt reads the pylon's answer: for a request that may
// be answered with a stream, on a connection that can hand one off (see handOff), the
// connection's own response, which a handed-off stream keeps while fasthttp releases the
// request's context (the pylon's body stream refers to the response it was read into);
// otherwise ctx.Response itself.
func upstreamResponse(ctx *fasthttp.RequestCtx, mayStream bool) *fasthttp.Response {
	if mayStream && ctx.Request.Header.IsHTTP11() && !ctx.IsHead() {
		if cc, ok := ctx.Conn().(*clientConn); ok {
			return &cc.upstream
		}
	}
	return &ctx.Response
}

// moveResponse makes from, an answer not handed off, ctx's answer to: its header and body,
// or its body stream.
func moveResponse(from, to *fasthttp.Response) {
	r, _ := relay.DetachBodyStream(from)
	from.CopyTo(to)
	to.ImmediateHeaderFlush = from.ImmediateHeaderFlush
	if r != nil {
		to.SetBodyStream(r, from.Header.ContentLength())
	}
}

// handOff hijacks ctx's connection for the event stream guarded by cc.stream, read into
// resp (the connection's upstream response), unless a drain is under way. false: the
// stream stays in resp for fasthttp to write.
func (g *Gateway) handOff(ctx *fasthttp.RequestCtx, resp *fasthttp.Response) bool {
	cc, ok := ctx.Conn().(*clientConn)
	if !ok || resp != &cc.upstream || !g.handoff.begin() {
		return false
	}
	cc.handedOff = true
	ctx.Response.SetStatusCode(resp.StatusCode()) // for the request's count and access record
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(g.relayFn)
	return true
}

// relayStream is the hijack handler, run once the request handler has returned. It takes
// what fasthttp's reader holds of a next request, and leaves the relay to a new goroutine:
// fasthttp releases the request's context and its reader when this returns, so an open
// stream holds neither.
func (g *Gateway) relayStream(hc net.Conn) {
	u, _ := hc.(interface{ UnsafeConn() net.Conn })
	cc, _ := u.UnsafeConn().(*clientConn) // handOff hijacks only these
	cc.handedOff = false
	// What the reader buffered past this request (a pipelined request) comes back at once;
	// the expired deadline keeps the read from waiting for the connection.
	_ = cc.SetReadDeadline(time.Unix(1, 0))
	bp := nextBufs.Get().(*[]byte) //nolint:forcetypeassert // the pool holds only these
	if n, _ := hc.Read(*bp); n > 0 {
		cc.pending, cc.pendingBuf = (*bp)[:n], bp
	} else {
		nextBufs.Put(bp)
	}
	_ = cc.SetReadDeadline(time.Time{})
	go g.relayOff(cc)
}

// relayOff writes the handed-off answer and relays its stream, then closes the connection
// or waits for its next request.
func (g *Gateway) relayOff(cc *clientConn) {
	h := &cc.upstream.Header
	h.SetContentLength(-1) // chunked, as fasthttp writes a body stream of unknown length
	keep := !h.ConnectionClose()
	err := writeClient(cc, h.Header())
	forgetHeader(h)
	if err == nil {
		err = relayTo(cc, &cc.stream)
	} else {
		_ = cc.stream.CloseWithError(err)
	}
	cc.upstream.Reset() // the stream has been closed: this gives the pylon connection back
	g.connState(cc, fasthttp.StateIdle) // the stream's deferred work, as after any answer
	if err != nil || !keep || !g.handoff.toIdle(cc) {
		g.closeHandedOff(cc)
		return
	}
	g.awaitNext(cc)
}

// forgetHeader drops the memory of a handed-off answer's header once it is written: all
// its stream still needs of it is whether the pylon closes the connection (the pylon
// connection's release asks) and somewhere to read a trailer into.
func forgetHeader(h *fasthttp.ResponseHeader) {
	closes := h.ConnectionClose()
	*h = fasthttp.ResponseHeader{}
	if closes {
		h.SetConnectionClose()
	}
}

// relayTo writes s's pieces as chunks, then the last chunk. s is closed with the error
// that ended it (nil when it ended normally), as fasthttp closes a body stream.
func relayTo(cc *clientConn, s *streamGuard) error {
	bp := chunkBufs.Get().(*[]byte) //nolint:forcetypeassert // the pool holds only these
	defer chunkBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := s.Read(buf[chunkRoom : chunkRoom+streamChunk])
		if n > 0 {
			if err := writeClient(cc, frameChunk(buf, n)); err != nil {
				_ = s.CloseWithError(err)
				return err
			}
		}
		switch {
		case rerr == io.EOF:
			_ = s.CloseWithError(nil)
			return writeClient(cc, lastChunk)
		case rerr != nil:
			_ = s.CloseWithError(rerr)
			return rerr
		}
	}
}

// frameChunk frames the n bytes at buf[chunkRoom:] as one chunk in place and returns it.
func frameChunk(buf []byte, n int) []byte {
	const hex = "0123456789abcdef"
	i := chunkRoom - 2
	buf[i], buf[i+1] = '\r', '\n'
	for v := n; ; v >>= 4 {
		i--
		buf[i] = hex[v&0xf]
		if v < 16 {
			break
		}
	}
	end := chunkRoom + n
	buf[end], buf[end+1] = '\r', '\n'
	return buf[i : end+2]
}

// writeClient writes b whole within clientWriteTimeout.
func writeClient(cc *clientConn, b []byte) error {
	if err := cc.SetWriteDeadline(time.Now().Add(clientWriteTimeout)); err != nil {
		return err //nolint:wrapcheck // the connection's own error
	}
	_, err := cc.Write(b)
	return err //nolint:wrapcheck // the connection's own error, as fasthttp would see it
}

// awaitNext waits, under the server's idle timeout, for the first bytes of the next
// request on a handed-off connection, then serves the connection again.
func (g *Gateway) awaitNext(cc *clientConn) {
	_ = cc.SetWriteDeadline(time.Time{})
	n := len(cc.pending)
	if n == 0 {
		_ = cc.SetReadDeadline(deadlineAfter(g.server.IdleTimeout))
		bp := nextBufs.Get().(*[]byte) //nolint:forcetypeassert // the pool holds only these
		n, _ = cc.Conn.Read(*bp)
		if n > 0 {
			cc.pending, cc.pendingBuf = (*bp)[:n], bp
		} else {
			nextBufs.Put(bp)
		}
	}
	if !g.handoff.fromIdle(cc) || n == 0 {
		g.closeHandedOff(cc)
		return
	}
	_ = g.server.ServeConn(cc) // closes cc and reports it closed when done
}

// closeHandedOff closes a handed-off connection and reports it closed (the connection
// count, deferred work).
func (g *Gateway) closeHandedOff(cc *clientConn) {
	_ = cc.Close()
	if cc.pendingBuf != nil {
		nextBufs.Put(cc.pendingBuf)
		cc.pending, cc.pendingBuf = nil, nil
	}
	if g.server.ConnState != nil {
		g.server.ConnState(cc, fasthttp.StateClosed)
	}
	g.handoff.end()
}

// handOffFailed ends a stream handed off on a connection that fasthttp closed before it ran
// the hijack (flushing an earlier answer failed): the stream is closed as for a client gone.
func (g *Gateway) handOffFailed(cc *clientConn) {
	cc.handedOff = false
	_ = cc.stream.CloseWithError(errHandOffFailed) // gives the pylon connection back
	cc.upstream.Reset()
	g.handoff.end()
}

var errHandOffFailed = errors.New("the connection closed before its stream was handed off")

// deadlineAfter is the deadline d from now; none for a duration fasthttp's guard uses for
// "no limit".
func deadlineAfter(d time.Duration) time.Time {
	if d <= 0 || d >= time.Duration(1<<61) {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// handoffs tracks the connections handed off the server: those relaying a stream and those
// waiting for their next request. A drain stops new hand-offs, wakes the waiting
// connections (they close) and waits for the streams.
type handoffs struct {
	mu      sync.Mutex
	n       int                      // connections handed off and not yet closed or served again
	idle    map[*clientConn]struct{} // those waiting for their next request
	closing bool
	empty   chan struct{} // closed when closing and n reaches 0
}

// begin counts a new hand-off; false during a drain.
func (h *handoffs) begin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.n++
	return true
}

// toIdle marks cc waiting for its next request; false during a drain (close it instead).
func (h *handoffs) toIdle(cc *clientConn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	if h.idle == nil {
		h.idle = map[*clientConn]struct{}{}
	}
	h.idle[cc] = struct{}{}
	return true
}

// fromIdle ends cc's wait: true when it goes back to the server (no longer counted here),
// false during a drain (close it).
func (h *handoffs) fromIdle(cc *clientConn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.idle, cc)
	if h.closing {
		return false
	}
	h.n--
	return true
}

// end uncounts a closed hand-off.
func (h *handoffs) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if h.closing && h.n == 0 {
		close(h.empty)
	}
}

// close stops new hand-offs and closes the connections waiting for their next request.
func (h *handoffs) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closing {
		h.closing, h.empty = true, make(chan struct{})
		if h.n == 0 {
			close(h.empty)
		}
	}
	for cc := range h.idle {
		_ = cc.SetReadDeadline(time.Now()) // wakes awaitNext, which closes it
	}
}

// wait waits, after close, until every handed-off stream has ended or ctx is done.
func (h *handoffs) wait(ctx context.Context) {
	h.mu.Lock()
	empty := h.empty
	h.mu.Unlock()
	select {
	case <-empty:
	case <-ctx.Done():
	}
}

// Package handoff relays a streamed answer off the connection's serving goroutine.
//
// fasthttp serves a connection on one goroutine and writes a body stream there, through
// its own 4 KiB copy buffer and the connection's write buffer, with the goroutine's stack
// sized by the deepest point of handling the request, and the request's context and read
// buffer held until the stream ends. A stream may stay open for minutes, so all of that
// was memory per open stream. A Server instead hijacks the connection (fasthttp writes
// nothing itself) and relays the stream on a goroutine of its own, whose stack holds only
// the relay loop, through a 1 KiB chunk buffer (an event stream takes it only while a
// piece is written: it waits for its next event reading one byte); fasthttp gets its
// serving goroutine, context and read buffer back at once. The answer on the wire is the
// one fasthttp would have written: the same header block, then the body chunked.
//
// The upstream answer must have been read into the connection's own response (Response),
// not the request context's: the upstream body stream refers to the response it was read
// into (it reads a trailer into its header), and the context is reused once released.
//
// When the stream has ended and the connection is to be kept alive, the connection waits
// for the client's next request (under the server's idle timeout) and goes back to
// fasthttp (Server.ServeConn), so keep-alive clients see no difference. A drain (Close,
// Wait) stops new hand-offs, closes the connections waiting for a next request and waits
// for the streams.
//
// The server's connection type embeds Conn (or its listener is wrapped in Listener). Its
// ConnState hook, when it counts connections, must keep a hijacked one counted:
// StateHijacked is not its end, the Server reports StateClosed when it closes it.
package handoff

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/relay"
)

// Stream is a relayed body, as fasthttp takes one: Read until io.EOF, then CloseWithError
// once, with nil when the body was written whole or the write error (the client went
// away).
type Stream interface {
	Read(p []byte) (int, error)
	CloseWithError(err error) error
}

// Conn is the part of a server connection a hand-off needs. A server's connection type
// embeds it, over the accepted connection.
type Conn struct {
	net.Conn

	// Upstream is the upstream answer of a request that may be handed off (see
	// Server.Response).
	Upstream fasthttp.Response

	outer      net.Conn // the connection fasthttp serves: the type embedding this one
	stream     Stream
	pending    []byte  // bytes of the next request read while handed off
	pendingBuf *[]byte // pending's buffer, back to nextBufs once read
	handedOff  bool    // a stream is to be handed off: the hijack has not run yet
	next       [1]byte // the first byte of a stream's next piece (relayChunked)
}

// Read reads what a hand-off read ahead first, then the connection.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		return c.Conn.Read(p) //nolint:wrapcheck // a pass-through
	}
	n := copy(p, c.pending)
	if c.pending = c.pending[n:]; len(c.pending) == 0 {
		c.dropPending()
	}
	return n, nil
}

// readAhead reads once from r into a pooled buffer and keeps what it got as pending.
func (c *Conn) readAhead(r io.Reader) {
	bp := nextBufs.Get().(*[]byte) //nolint:forcetypeassert // the pool holds only these
	if n, _ := r.Read(*bp); n > 0 {
		c.pending, c.pendingBuf = (*bp)[:n], bp
		return
	}
	nextBufs.Put(bp)
}

func (c *Conn) dropPending() {
	if c.pendingBuf != nil {
		nextBufs.Put(c.pendingBuf)
	}
	c.pending, c.pendingBuf = nil, nil
}

// SyscallConn exposes the connection's socket, when it has one (a socket peek sees
// through the wrapper).
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNoSocket
	}
	return sc.SyscallConn() //nolint:wrapcheck // a pass-through
}

var errNoSocket = errors.New("the connection has no socket")

// Listener wraps the connections ln accepts in *Conn, for a server with no connection
// type of its own.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err //nolint:wrapcheck // the listener's own error, as servers expect
	}
	return &Conn{Conn: c}, nil
}

// handoffConn is how the server finds the Conn inside a connection type that embeds one.
func (c *Conn) handoffConn() *Conn { return c }

type embedsConn interface{ handoffConn() *Conn }

// connOf returns the Conn inside nc, or nil.
func connOf(nc net.Conn) *Conn {
	if e, ok := nc.(embedsConn); ok {
		return e.handoffConn()
	}
	return nil
}

// streamChunk is the largest piece of a stream relayed in one write. Events are smaller;
// a burst larger than this takes more than one write.
const streamChunk = 1 << 10

// chunkRoom is the room before a piece for its chunk-size line ("400\r\n" at most).
const chunkRoom = 5

// lastChunk ends a chunked body (no trailers).
var lastChunk = []byte("0\r\n\r\n")

var chunkBufs = sync.Pool{New: func() any {
	b := make([]byte, chunkRoom+streamChunk+2)
	return &b
}}

// nextBufs hold the first bytes of a handed-off connection's next request until fasthttp
// reads them: at least as large as fasthttp's read buffer, so a read of the hijacked
// connection takes all that its reader buffered.
var nextBufs = sync.Pool{New: func() any {
	b := make([]byte, 4<<10)
	return &b
}}

// Server hands off the streams of one fasthttp server.
type Server struct {
	srv   *fasthttp.Server
	ended func(net.Conn) // after a stream, before its connection waits or closes
	relay fasthttp.HijackHandler

	mu      sync.Mutex
	n       int            // connections handed off and not yet closed or served again
	idle    map[*Conn]bool // those waiting for their next request
	closing bool
	empty   chan struct{} // closed once closing and n is 0
}

// New returns srv's hand-off server. It sets srv to keep hijacked connections open (a
// handed-off connection is closed or served again by the Server) and wraps srv.ConnState
// (set it first) so that a connection closed before its hijack ran has its stream closed.
// ended, when not nil, runs on the connection fasthttp served once each handed-off stream
// has ended (as fasthttp reports StateIdle after an answer).
func New(srv *fasthttp.Server, ended func(net.Conn)) *Server {
	srv.KeepHijackedConns = true
	s := &Server{srv: srv, ended: ended}
	s.relay = s.hijacked
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, st fasthttp.ConnState) {
		if st == fasthttp.StateClosed {
			s.closed(c)
		}
		if next != nil {
			next(c, st)
		}
	}
	return s
}

// Response is where a request's upstream answer is to be read: when it may be a stream
// (mayStream) that its connection can hand off (an HTTP/1.1 request, not HEAD, on a
// connection embedding Conn), the connection's own response; otherwise ctx.Response.
func Response(ctx *fasthttp.RequestCtx, mayStream bool) *fasthttp.Response {
	if mayStream && ctx.Request.Header.IsHTTP11() && !ctx.IsHead() {
		if c := connOf(ctx.Conn()); c != nil {
			return &c.Upstream
		}
	}
	return &ctx.Response
}

// Move makes from, an upstream answer read into a connection's response and not handed
// off, the answer to: its header and body, or its body stream.
func Move(from, to *fasthttp.Response) {
	if from == to {
		return
	}
	r, _ := relay.DetachBodyStream(from)
	from.CopyTo(to)
	to.ImmediateHeaderFlush = from.ImmediateHeaderFlush
	if r != nil {
		to.SetBodyStream(r, from.Header.ContentLength())
	}
}

// HandOff hijacks ctx's connection to write resp (read into its Response) with the body
// st, unless a drain is under way or resp is not the connection's own. false: nothing is
// done, and the caller has fasthttp write the answer (Move).
func (s *Server) HandOff(ctx *fasthttp.RequestCtx, resp *fasthttp.Response, st Stream) bool {
	c := connOf(ctx.Conn())
	if c == nil || resp != &c.Upstream || !s.begin() {
		return false
	}
	c.outer, c.stream, c.handedOff = ctx.Conn(), st, true
	if ctx.Request.Header.ConnectionClose() {
		resp.Header.SetConnectionClose() // as fasthttp answers such a request: then it closes
	}
	ctx.Response.SetStatusCode(resp.StatusCode()) // what the handler's own accounting reads
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(s.relay)
	return true
}

// hijacked is the hijack handler, run once the request handler has returned. It takes
// what fasthttp's reader holds of a next request and leaves the relay to a new
// goroutine: fasthttp releases the request's context and its reader when this returns.
func (s *Server) hijacked(hc net.Conn) {
	u, _ := hc.(interface{ UnsafeConn() net.Conn })
	c := connOf(u.UnsafeConn()) // HandOff hijacks only these
	c.handedOff = false
	// What the reader buffered past this request (a pipelined request) comes back at once;
	// the expired deadline keeps the read from waiting for the connection.
	_ = c.SetReadDeadline(time.Unix(1, 0))
	c.readAhead(hc)
	_ = c.SetReadDeadline(time.Time{})
	go s.serve(c)
}

// serve writes the handed-off answer and relays its stream, then closes the connection or
// waits for its next request.
func (s *Server) serve(c *Conn) {
	h := &c.Upstream.Header
	h.SetContentLength(-1) // chunked, as fasthttp writes a body stream of unknown length
	keep := !h.ConnectionClose()
	events := relay.IsEventStream(h)
	err := write(c, h.Header())
	forgetHeader(h)
	st := c.stream
	c.stream = nil
	if err == nil {
		err = relayChunked(c, st, events)
	} else {
		_ = st.CloseWithError(err)
	}
	c.Upstream.Reset() // the stream is closed: this drops what is left of the answer
	if s.ended != nil {
		s.ended(c.outer)
	}
	if err != nil || !keep || !s.toIdle(c) {
		s.close(c)
		return
	}
	s.awaitNext(c)
}

// forgetHeader drops the memory of a handed-off answer's header once it is written: all
// its stream still needs of it is whether the upstream closes its connection (asked when
// the upstream connection is released) and somewhere to read a trailer into.
func forgetHeader(h *fasthttp.ResponseHeader) {
	closes := h.ConnectionClose()
	*h = fasthttp.ResponseHeader{}
	if closes {
		h.SetConnectionClose()
	}
}

// relayChunked writes st's pieces to c as chunks, then the last chunk. st is closed with
// the error that ended it (nil when it ended normally), as fasthttp closes a body stream:
// before the last chunk is written, as fasthttp does.
//
// An event stream (events) spends most of its life waiting for its next event, so it
// waits reading one byte into the connection's own next: no chunk buffer is held while it
// waits. Once that byte has come, relayPiece takes a pooled one for the rest of the
// piece. Any other body is read straight into the pooled buffer.
func relayChunked(c *Conn, st Stream, events bool) error {
	for {
		var n int
		var rerr, werr error
		if events {
			n, rerr = st.Read(c.next[:])
		}
		if !events || n > 0 {
			rerr, werr = relayPiece(c, st, n > 0, rerr)
		}
		if werr != nil {
			_ = st.CloseWithError(werr)
			return werr
		}
		switch {
		case errors.Is(rerr, io.EOF):
			_ = st.CloseWithError(nil)
			return write(c, lastChunk)
		case rerr != nil:
			_ = st.CloseWithError(rerr)
			return rerr
		}
	}
}

// relayPiece writes one piece of st as one chunk, through a pooled buffer: when lead, the
// byte of an event stream just read into c.next (rerr is that read's error), then what one
// read of st gives (an upstream body stream returns at most the rest of its chunk). After
// a lead byte that read is not made when the stream has ended or when the byte ends a
// line: the byte may have been all of its piece, and the read would then wait for the
// next piece. Waiting is harmless for a byte within a line, which is of no use to an
// event-stream client before its line ends. It returns the error of the last read and
// that of the write.
func relayPiece(c *Conn, st Stream, lead bool, rerr error) (readErr, writeErr error) {
	bp := chunkBufs.Get().(*[]byte) //nolint:forcetypeassert // the pool holds only these
	defer chunkBufs.Put(bp)
	buf := *bp
	n := 0
	if lead {
		buf[chunkRoom], n = c.next[0], 1
	}
	if rerr == nil && (!lead || c.next[0] != '\n' && c.next[0] != '\r') {
		var m int
		m, rerr = st.Read(buf[chunkRoom+n : chunkRoom+streamChunk])
		n += m
	}
	if n == 0 {
		return rerr, nil
	}
	return rerr, write(c, frameChunk(buf, n))
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

// write writes b whole; the connection bounds how long it may wait (relay.BoundWrites,
// the servers' --write-timeout).
func write(c *Conn, b []byte) error {
	_, err := c.Write(b)
	return err //nolint:wrapcheck // the connection's own error, as fasthttp would see it
}

// awaitNext waits, under the server's idle timeout, for the first bytes of the next
// request on a handed-off connection, then serves the connection again.
func (s *Server) awaitNext(c *Conn) {
	if len(c.pending) == 0 {
		_ = c.SetReadDeadline(deadlineAfter(s.srv.IdleTimeout))
		c.readAhead(c.Conn)
	}
	if !s.fromIdle(c, len(c.pending) > 0) {
		s.close(c)
		return
	}
	_ = s.srv.ServeConn(c.outer) // closes the connection and reports it closed when done
}

// close closes a handed-off connection and reports it closed to the server's hook.
func (s *Server) close(c *Conn) {
	_ = c.outer.Close()
	c.dropPending()
	s.srv.ConnState(c.outer, fasthttp.StateClosed) // New set it
	s.end()
}

// closed runs on StateClosed (New's hook): a connection fasthttp closed after its handler
// handed a stream off but before the hijack ran (flushing an earlier answer failed) has
// its stream closed, as for a client gone.
func (s *Server) closed(nc net.Conn) {
	c := connOf(nc)
	if c == nil || !c.handedOff {
		return
	}
	c.handedOff = false
	_ = c.stream.CloseWithError(errNotHandedOff)
	c.stream = nil
	c.Upstream.Reset()
	s.end()
}

var errNotHandedOff = errors.New("the connection closed before its stream was handed off")

// deadlineAfter is the deadline d from now; none for a duration meaning "no limit".
func deadlineAfter(d time.Duration) time.Time {
	if d <= 0 || d >= time.Duration(1<<61) {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// begin counts a new hand-off; false during a drain.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.n++
	return true
}

// toIdle marks c waiting for its next request; false during a drain (close it instead).
func (s *Server) toIdle(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	if s.idle == nil {
		s.idle = map[*Conn]bool{}
	}
	s.idle[c] = true
	return true
}

// fromIdle ends c's wait: true when it goes back to the server (no longer counted here);
// false when it is to be closed (still counted until then): it got no next request
// (served false), or a drain is under way.
func (s *Server) fromIdle(c *Conn, served bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.idle, c)
	if s.closing || !served {
		return false
	}
	s.n--
	return true
}

// end uncounts a closed hand-off.
func (s *Server) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	if s.closing && s.n == 0 {
		close(s.empty)
	}
}

// Close stops new hand-offs and closes the connections waiting for their next request.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing {
		s.closing, s.empty = true, make(chan struct{})
		if s.n == 0 {
			close(s.empty)
		}
	}
	for c := range s.idle {
		_ = c.SetReadDeadline(time.Now()) // wakes awaitNext, which closes it
	}
}

// Wait waits, after Close, until every handed-off connection has closed or ctx is done
// (then it returns ctx's error).
func (s *Server) Wait(ctx context.Context) error {
	s.mu.Lock()
	empty := s.empty
	s.mu.Unlock()
	if empty == nil {
		return nil
	}
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
		return ctx.Err() //nolint:wrapcheck // the caller's own context
	}
}

// Streams is the number of handed-off streams being relayed now (not counting the
// connections waiting for a next request).
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n - len(s.idle)
}

// Active is the number of connections handed off now (relaying or waiting for a next
// request).
func (s *Server) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

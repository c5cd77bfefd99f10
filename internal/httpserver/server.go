package httpserver

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// forever stands for "no deadline" where fasthttp takes a duration: zero there would
// fall back to another timeout.
const forever = time.Duration(1 << 62)

// Guard is the state Apply attaches to one server: its open connections and the memory
// its large request bodies hold.
type Guard struct {
	inner      fasthttp.RequestHandler
	errHandler func(*fasthttp.RequestCtx, error)
	innerState func(net.Conn, fasthttp.ConnState)
	maxBody    int
	// bodyWait bounds a request's wait for the large-body budget.
	bodyWait time.Duration
	// clearDeadline: a body read deadline was set at the end of the headers; the handler
	// runs without it (it may stream for hours).
	clearDeadline bool
	maxConns      int
	tls           bool
	budget        budget

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	releasePending atomic.Bool
}

// Apply sets the limits on s and returns the server's guard. Call it once s.Handler,
// s.ErrorHandler, s.ConnState and s.MaxRequestBodySize are set (the body limit stays the
// server's; the handler, error handler and connection hook are wrapped, not replaced).
// overTLS says whether the listener s will serve hands it TLS connections: a connection
// over the cap then is closed without an answer (writing one would first wait for the
// client's TLS handshake).
//
// The server reads request bodies through the guard (fasthttp's StreamRequestBody), so a
// handler still finds the whole body in ctx.PostBody(); a body over the limit is answered
// by the error handler with fasthttp.ErrBodyTooLarge as soon as the limit is crossed.
func Apply(s *fasthttp.Server, l Limits, overTLS bool) *Guard {
	l = l.WithDefaults()
	maxBody := s.MaxRequestBodySize
	if maxBody <= 0 {
		maxBody = fasthttp.DefaultMaxRequestBodySize
	}
	mem := l.BodyMemoryBytes
	if mem == 0 {
		mem = 2 * maxBody
	}
	g := &Guard{
		inner: s.Handler, errHandler: s.ErrorHandler, innerState: s.ConnState,
		maxBody: maxBody, maxConns: l.MaxConnections, tls: overTLS,
		budget: budget{limit: max(mem, maxBody)},
		conns:  map[net.Conn]struct{}{},
	}
	g.budget.onIdle = g.idle
	g.bodyWait = DefaultBodyReadTimeout
	if l.BodyReadTimeout > 0 {
		g.bodyWait = l.BodyReadTimeout
	}
	limitPools()

	// fasthttp arms ReadTimeout when a connection opens and again at the first byte of
	// each request after an idle wait: it bounds the wait for a first request and the
	// reading of every header. HeaderReceived then moves the deadline to the end of the
	// body read.
	s.ReadTimeout, s.IdleTimeout = orForever(l.ReadHeaderTimeout), orForever(l.IdleTimeout)
	var conf fasthttp.RequestConfig
	if l.ReadHeaderTimeout > 0 || l.BodyReadTimeout > 0 {
		conf.ReadTimeout = orForever(l.BodyReadTimeout)
		g.clearDeadline = true
	}
	s.HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		// A declared length over the limit is refused before any of the body is read
		// (fasthttp would first wait for up to 8 KiB of it): the request goes on without
		// a body, marked for handle to answer 413.
		if h.ContentLength() > maxBody {
			h.SetContentLength(0)
			h.Set(overLimit, "1")
		}
		return conf
	}
	if l.ReadHeaderTimeout < 0 {
		s.ReadTimeout = 0
	}
	if l.IdleTimeout < 0 && l.ReadHeaderTimeout < 0 {
		s.IdleTimeout = 0
	}
	// No WriteTimeout: fasthttp arms it once for the whole response, which would cut a
	// long stream.
	s.StreamRequestBody = true
	s.Handler = g.handle
	s.ConnState = g.connState
	return g
}

func orForever(d time.Duration) time.Duration {
	if d <= 0 {
		return forever
	}
	return d
}

// OpenConnections is the number of connections the server holds now.
func (g *Guard) OpenConnections() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// BodyMemory is the memory large request bodies hold (or have reserved) now.
func (g *Guard) BodyMemory() int { return g.budget.inUse() }

// connState counts connections and refuses those over the cap.
func (g *Guard) connState(c net.Conn, st fasthttp.ConnState) {
	switch st { //nolint:exhaustive // only a connection's start and end matter
	case fasthttp.StateNew:
		g.mu.Lock()
		over := g.maxConns > 0 && len(g.conns) >= g.maxConns
		if !over {
			g.conns[c] = struct{}{}
		}
		g.mu.Unlock()
		if over {
			g.refuseConn(c)
		}
	case fasthttp.StateClosed: // a hijacked connection stays counted until its hijacker reports it closed
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
	}
	if g.innerState != nil {
		g.innerState(c, st)
	}
}

// overLimit marks a request whose declared body length is over the limit. No header read
// from the wire can have this name: a colon ends a name there.
const overLimit = ":switchyard-body-over-limit"

// tooManyConns is the whole answer to a connection over the cap.
const tooManyConns = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 33\r\n\r\ntoo many connections, retry later"

// refuseConn answers 503 on a plain connection (a fresh socket takes the few bytes at
// once; a one-second write deadline bounds the odd case) and closes it. fasthttp then
// finds the connection closed and ends it quietly.
func (g *Guard) refuseConn(c net.Conn) {
	if !g.tls {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(c, tooManyConns)
	}
	_ = c.Close()
}

// handle reads the request body, lifts the body read deadline and runs the handler.
func (g *Guard) handle(ctx *fasthttp.RequestCtx) {
	if ctx.Request.Header.ContentLength() == 0 && ctx.Request.Header.Peek(overLimit) != nil {
		g.fail(ctx, fasthttp.ErrBodyTooLarge)
		return
	}
	if ctx.Request.IsBodyStream() && !g.readBody(ctx) {
		return
	}
	if g.clearDeadline {
		_ = ctx.Conn().SetReadDeadline(time.Time{})
	}
	g.inner(ctx)
}

// fail answers a request whose body could not be read and closes its connection (the
// rest of the body is not read).
func (g *Guard) fail(ctx *fasthttp.RequestCtx, err error) bool {
	switch {
	case errors.Is(err, errBusy):
		ctx.Response.Reset()
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.Response.Header.Set("Retry-After", "1")
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString("too many large request bodies in progress, retry later")
	case g.errHandler != nil:
		g.errHandler(ctx, err)
	default:
		defaultError(ctx, err)
	}
	ctx.SetConnectionClose()
	return false
}

var errBusy = errors.New("the large request body budget stayed spent")

// defaultError answers like fasthttp's own error handler, with 413 for a large body.
func defaultError(ctx *fasthttp.RequestCtx, err error) {
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ctx.Error("Request Entity Too Large", fasthttp.StatusRequestEntityTooLarge)
	case errors.As(err, &ne) && ne.Timeout():
		ctx.Error("Request timeout", fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("Error when parsing request", fasthttp.StatusBadRequest)
	}
}

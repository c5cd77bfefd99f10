package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/internal/handoff"
	"github.com/switchyard/switchyard/internal/relay"
)

// Work a buffered (non-streamed) answer does not need before the client has it — applying
// the pylon's load report and counting the attempt and the request — is deferred until
// fasthttp has written the response: fasthttp calls Server.ConnState with StateIdle (or
// StateClosed) on the connection's serving goroutine after the flush, and the hook runs
// the connection's pending work there. The next request on that connection therefore
// always sees it applied; other connections see it a write later. Streamed answers and
// retried attempts apply the load report at once (the scheduler needs it before the next
// attempt, and a stream may last minutes).

var errNoSyscallConn = errors.New("the connection has no socket")

// clientListener wraps accepted connections in *clientConn, inside TLS when tls is set
// (the handshake runs on the connection's first read, in its serving goroutine), with raw
// socket reads and writes when raw is set (--raw-socket-io), its writes bounded by
// writeStall (--write-timeout; 0: unbounded).
type clientListener struct {
	net.Listener
	tls        *tls.Config
	raw        bool
	writeStall time.Duration
}

func (l clientListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err //nolint:wrapcheck // the listener's own error, as fasthttp expects
	}
	raw := c
	if l.raw {
		raw = relay.Raw(c)
	}
	raw = relay.BoundWrites(raw, l.writeStall)
	if l.tls != nil {
		return &clientConn{Conn: handoff.Conn{Conn: tls.Server(raw, l.tls)}, socket: raw}, nil
	}
	return &clientConn{Conn: handoff.Conn{Conn: raw}, socket: raw}, nil
}

// clientConn is an accepted client connection and the work its last answer deferred.
type clientConn struct {
	handoff.Conn          // the connection, and its state when a stream is handed off (handoff.go)
	socket       net.Conn // the TCP connection beneath TLS (Conn itself when plain)
	after        afterResponse
	stream       streamGuard // the event stream being written to this connection (stream.go)
}

// overTLS reports whether the connection is served inside TLS.
func (c *clientConn) overTLS() bool {
	_, ok := c.Conn.Conn.(*tls.Conn)
	return ok
}

// SyscallConn exposes the socket (clientGone peeks it).
func (c *clientConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.socket.(syscall.Conn)
	if !ok {
		return nil, errNoSyscallConn
	}
	return sc.SyscallConn() //nolint:wrapcheck // a pass-through
}

// afterResponse is one request's deferred work, all on the request's target series ts:
// the replay size, the last grant's selection, the last attempt's load report (copied) and
// counters, and the request's count. pending says which parts wait.
type afterResponse struct {
	ts      *targetSeries
	pending uint8
	// replay
	replayBytes int
	// selection
	algorithm string
	rank      int
	kvSkipped bool
	session   lb.SessionState
	routing   time.Duration
	// attempt
	b        *fleet.Backend
	bs       *backendSeries
	load     []byte // the x-pylon-load value, copied
	hasLoad  bool
	at       time.Time
	status   int
	proxy    time.Duration
	overhead time.Duration // arrival to the upstream call; < 0: not recorded (retried)
	// request
	backend string
	reqCode int
	// the access log's record (accesslog.go), made by the connection's first logged
	// request: with the log off, a connection does not carry it
	access *accessRecord
}

// The parts of afterResponse.pending.
const (
	afterReplay uint8 = 1 << iota
	afterSelection
	afterAttempt
	afterRequest
	afterAccess
)

// begin starts a request's deferred work (anything left from an earlier answer is
// applied first: never lost).
func (a *afterResponse) begin(g *Gateway, ts *targetSeries, replayBytes int) {
	a.run(g)
	a.ts, a.replayBytes, a.pending = ts, replayBytes, afterReplay
}

// setSelection records a grant; one still pending from an earlier attempt is counted first.
func (a *afterResponse) setSelection(algorithm string, out *dispatch.Outcome) {
	a.runSelection()
	a.algorithm, a.rank, a.kvSkipped, a.routing, a.session = algorithm, out.RankDepth, out.KVSkipped, out.Routing, out.Session
	a.pending |= afterSelection
}

func (a *afterResponse) runSelection() {
	if a.pending&afterSelection != 0 {
		a.pending &^= afterSelection
		a.ts.selected(a.algorithm, a.rank, a.kvSkipped, a.routing, a.session)
	}
}

// setAttempt records an attempt's answer. load aliases the response header and is copied.
func (a *afterResponse) setAttempt(bs *backendSeries, b *fleet.Backend, status int, load []byte, at time.Time, proxy time.Duration) {
	a.bs, a.b, a.status, a.at, a.proxy, a.overhead = bs, b, status, at, proxy, -1
	a.hasLoad = load != nil
	a.load = append(a.load[:0], load...)
	a.pending |= afterAttempt
}

// runAttempt applies the recorded attempt: the load report, then its metrics.
func (a *afterResponse) runAttempt(g *Gateway) {
	if a.pending&afterAttempt == 0 {
		return
	}
	a.pending &^= afterAttempt
	if a.hasLoad {
		if r, err := parseLoadReport(a.load, a.ts.t.Model); err == nil {
			g.fleet.ReportLoad(a.b, &r, a.at)
			g.metrics.loadApplied.Inc()
		} else {
			g.metrics.inc(mLoadReports, "result", "invalid")
		}
	}
	a.bs.proxyDuration.Update(a.proxy.Seconds())
	a.ts.attempt(a.bs, a.status)
	if a.overhead >= 0 {
		a.ts.overhead.Update(a.overhead.Seconds())
	}
	a.b, a.bs = nil, nil
}

// setRequest records the finished request's count.
func (a *afterResponse) setRequest(backend string, status int) {
	a.backend, a.reqCode = backend, status
	a.pending |= afterRequest
}

// run applies everything pending.
func (a *afterResponse) run(g *Gateway) {
	if a.pending == 0 {
		return
	}
	if a.pending&afterReplay != 0 {
		a.ts.replay.Update(float64(a.replayBytes))
	}
	a.runSelection()
	a.runAttempt(g)
	if a.pending&afterRequest != 0 {
		a.ts.request(a.backend, a.reqCode)
	}
	if a.pending&afterAccess != 0 {
		a.runAccess(g)
	}
	a.pending, a.ts = 0, nil
}

// afterFor returns the deferred-work slot of ctx's connection, or nil when the connection
// has none (served through ServeConn, not Serve): the caller then applies work at once.
func afterFor(ctx *fasthttp.RequestCtx) *afterResponse {
	if cc, ok := ctx.Conn().(*clientConn); ok {
		return &cc.after
	}
	return nil
}

// connState runs a connection's deferred work once its answer has been written.
func (g *Gateway) connState(nc net.Conn, st fasthttp.ConnState) {
	if st != fasthttp.StateIdle && st != fasthttp.StateClosed {
		return
	}
	cc, ok := nc.(*clientConn)
	if !ok {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			cc.after = afterResponse{} // drop the work rather than repeat a panic
			g.log.Error("deferred_work_panic", "panic", fmt.Sprint(r))
		}
	}()
	cc.after.run(g)
}

package relay

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Why a Conns closed an upstream connection itself (Conns.onAbort, AbortError).
const (
	abortNone uint32 = iota
	AbortFirstOutput
	AbortStreamIdle
	AbortShutdown
	// AbortUnanswered: the caller gave up on the requests still waiting for this
	// upstream (Abandon), e.g. because it stopped answering.
	AbortUnanswered
)

// AbortError is the error a read on an upstream connection returns once its Conns has
// closed that connection. The two timeouts report Timeout() == true, so fasthttp's Do
// returns ErrTimeout for them (and its RetryIfErr never resends the request); a shutdown
// abort reads like a connection the upstream closed.
type AbortError uint32

func (e AbortError) Error() string {
	switch uint32(e) {
	case AbortFirstOutput:
		return "the upstream sent no response bytes within the first-output timeout"
	case AbortStreamIdle:
		return "the upstream response stalled longer than the stream idle timeout"
	case AbortUnanswered:
		return "the upstream stopped answering: its unanswered requests were abandoned"
	default:
		return "upstream call aborted: shutting down"
	}
}

// Timeout tells fasthttp (and net.Error users) whether the abort was a timeout. An
// abandoned request (AbortUnanswered) is not one: fasthttp reports it as a connection
// closed before the first response byte, and never resends a POST.
func (e AbortError) Timeout() bool {
	return uint32(e) == AbortFirstOutput || uint32(e) == AbortStreamIdle
}

// DialError is the error of a connection that could not be made: whatever request was to
// go on it never left.
type DialError struct{ Err error }

func (e *DialError) Error() string { return e.Err.Error() }

// Unwrap returns the dialer's error.
func (e *DialError) Unwrap() error { return e.Err }

// Timeout reports whether the dial timed out.
func (e *DialError) Timeout() bool { return IsTimeout(e.Err) }

// IsTimeout reports whether err is, or wraps, an error that says it is a timeout (a
// deadline that passed).
func IsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// errShuttingDown refuses new connections once Abort has run.
var errShuttingDown = errors.New("shutting down: no new upstream connections")

// Watchdog granularity: an eighth of the shortest timeout, within [minWatchPeriod, maxWatchPeriod].
const (
	minWatchPeriod = time.Millisecond
	maxWatchPeriod = time.Second
)

// Conns tracks a proxy's connections to one upstream and bounds every wait for it: the
// pylon's engine connections (first output and stream idle timeouts) and the gateway's
// pylon connections (the wait for an answer only).
//   - One watchdog goroutine (Watch) ticks every period and closes a connection whose
//     pending read has waited longer than the first-output timeout (no response bytes
//     since the request was written) or the stream idle timeout (after the first bytes).
//     The blocked read then fails: before the response headers fasthttp's Do returns
//     ErrTimeout (the pylon answers 504, the gateway 502 or fails over); in a relayed stream
//     the body read fails and the stream is cut.
//   - Abort (a shutdown past its drain timeout) closes every connection and refuses new
//     ones, so no handler waits for the upstream any longer.
//   - Abandon closes the connections to one address whose request has no
//     response byte yet (the gateway's pylon stopped answering its health probes), so
//     those requests fail over at once instead of waiting out their deadlines.
//
// The data path pays two atomic stores and two loads per read: no timer, no clock read, no
// allocation. Reads stamp themselves with a coarse tick that only the watchdog advances,
// so a timeout T fires between T and T + 2 periods after the read began (between T and
// T + 1 period when the period divides T, as with the defaults).
//
// With RequestDeadlines, each request may bring its own first-output deadline instead of
// the fixed one: fasthttp hands a request's deadline (Request.SetTimeout, DoTimeout) to
// the connection's SetReadDeadline after writing the request, and the connection keeps
// it as a tick (one clock read per request, still no timer and no allocation) instead of
// arming the socket's deadline, which would stay on the connection and cut a stream.
type Conns struct {
	dial       fasthttp.DialFuncWithTimeout
	period     time.Duration
	firstTicks uint64 // first-output timeout in ticks (0 = none)
	idleTicks  uint64 // stream idle timeout in ticks (0 = none)
	onAbort    func(why uint32)
	tick       atomic.Uint64 // starts at 1: a read stamp of 0 means "not reading"
	// perRequest makes SetReadDeadline set the connection's first-output deadline
	// (RequestDeadlines).
	perRequest bool
	// plain keeps the dialled connections' own reads and writes instead of Raw's (PlainIO).
	plain bool

	closed atomic.Bool // set (under mu) by abort

	mu      sync.Mutex
	conns   map[*conn]struct{}
	expired []expiredConn // the watchdog's scratch list
}

type expiredConn struct {
	c   *conn
	why uint32
}

// NewConns wraps dial (nil: fasthttp's TCP dialer). onAbort is called once per
// connection the watchdog closes, with the reason.
func NewConns(dial fasthttp.DialFunc, firstOutput, streamIdle time.Duration, onAbort func(why uint32)) *Conns {
	w := &Conns{conns: map[*conn]struct{}{}, onAbort: onAbort}
	w.tick.Store(1)
	if dial != nil {
		w.dial = func(addr string, _ time.Duration) (net.Conn, error) { return dial(addr) }
	} else {
		w.dial = func(addr string, timeout time.Duration) (net.Conn, error) {
			addr = fasthttp.AddMissingPort(addr, false)
			if timeout > 0 {
				return fasthttp.DialTimeout(addr, timeout)
			}
			return fasthttp.Dial(addr)
		}
	}
	w.setPeriod(firstOutput, streamIdle, 0)
	return w
}

// setPeriod derives the watchdog period from the shortest of the timeouts (and of the
// shortest request deadline expected, 0 = none) and the fixed timeouts' ticks.
func (w *Conns) setPeriod(firstOutput, streamIdle, shortestRequest time.Duration) {
	shortest := time.Duration(0)
	for _, d := range []time.Duration{firstOutput, streamIdle, shortestRequest} {
		if d > 0 && (shortest == 0 || d < shortest) {
			shortest = d
		}
	}
	if shortest == 0 {
		return // no timeouts: no watchdog
	}
	w.period = min(max(shortest/8, minWatchPeriod), maxWatchPeriod)
	w.firstTicks, w.idleTicks = w.ticks(firstOutput), w.ticks(streamIdle)
}

// ticks converts a timeout to watchdog ticks (0 = none). A read stamped s is expired at
// tick k when k − s ≥ ticks, which guarantees at least (ticks − 1) periods of waiting:
// hence the +1.
func (w *Conns) ticks(d time.Duration) uint64 {
	if d <= 0 || w.period == 0 {
		return 0
	}
	return uint64((d+w.period-1)/w.period) + 1 //nolint:gosec // d > 0
}

// RequestDeadlines makes every connection take its first-output deadline from the
// request being sent (see Conns) rather than the fixed first-output timeout, which then
// only applies to requests without a deadline. shortest is the shortest deadline a
// request will bring: the watchdog ticks at an eighth of it (at least once a second), so a
// deadline d fires between d and d + 2 periods after the request was written. Call it
// before the first dial and before Watch; firstOutput and streamIdle are NewConns'.
func (w *Conns) RequestDeadlines(firstOutput, streamIdle, shortest time.Duration) *Conns {
	w.perRequest = true
	w.setPeriod(firstOutput, streamIdle, shortest)
	return w
}

// PlainIO makes the connections use the dialled net.Conn's own reads and writes instead
// of raw syscalls (--raw-socket-io=false). The watchdog, the request deadlines and Abort
// work the same: they close the connection, which fails its pending read either way.
// Call it before the first dial.
func (w *Conns) PlainIO() *Conns {
	w.plain = true
	return w
}

// DialTimeout is the HostClient's DialTimeout.
func (w *Conns) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if w.closed.Load() {
		return nil, errShuttingDown
	}
	nc, err := w.dial(addr, timeout)
	if err != nil {
		return nil, &DialError{Err: err}
	}
	c := &conn{Conn: nc, w: w, addr: addr}
	if !w.plain {
		c.Conn = Raw(nc)
	}
	w.mu.Lock()
	if w.closed.Load() {
		w.mu.Unlock()
		_ = nc.Close()
		return nil, errShuttingDown
	}
	w.conns[c] = struct{}{}
	w.mu.Unlock()
	return c, nil
}

// Watch runs the watchdog until stop is closed; it returns at once without timeouts.
func (w *Conns) Watch(stop <-chan struct{}) {
	if w.period == 0 {
		return
	}
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.check(w.tick.Add(1))
		}
	}
}

// check closes the connections whose pending read has expired at tick now.
func (w *Conns) check(now uint64) {
	w.mu.Lock()
	for c := range w.conns {
		since := c.readSince.Load()
		if since == 0 {
			continue
		}
		limit, why := w.idleTicks, AbortStreamIdle
		if !c.answered.Load() {
			limit, why = w.firstTicks, AbortFirstOutput
			if dl := c.deadline.Load(); dl != 0 {
				// The request's own deadline: expired once the tick reaches it.
				if now >= dl {
					w.expired = append(w.expired, expiredConn{c: c, why: why})
				}
				continue
			}
		}
		if limit > 0 && now-since >= limit {
			w.expired = append(w.expired, expiredConn{c: c, why: why})
		}
	}
	expired := w.expired
	w.expired = w.expired[:0]
	w.mu.Unlock()
	for i, e := range expired {
		if e.c.abort(e.why) {
			w.onAbort(e.why)
		}
		expired[i] = expiredConn{}
	}
}

// Abort closes every connection and refuses new ones (shutdown past the drain
// timeout). It returns the number of connections closed.
func (w *Conns) Abort() int {
	w.mu.Lock()
	w.closed.Store(true)
	all := make([]*conn, 0, len(w.conns))
	for c := range w.conns {
		all = append(all, c)
	}
	w.mu.Unlock()
	for _, c := range all {
		c.abort(AbortShutdown)
	}
	return len(all)
}

// Abandon closes the connections dialled to addr that wait for the upstream, failing
// their pending reads and writes with AbortError(AbortUnanswered) (fasthttp's Do returns
// ErrConnectionClosed, or that AbortError for a write cut short):
//   - every one that carries a request with no response byte yet (written, or being
//     written, and not answered);
//   - with stalled > 0, also every one whose response has begun but whose pending read
//     has waited at least stalled for more (a stream the upstream stopped feeding; a
//     relayed stream then ends). The wait is judged by the watchdog's ticks, erring
//     towards sparing a read (one begun less than stalled ago is never closed); without a
//     watchdog only unanswered ones are closed.
//
// Idle connections, and responses still arriving, are left alone. It returns the number
// of connections closed.
func (w *Conns) Abandon(addr string, stalled time.Duration) int {
	limit := w.ticks(stalled) // 0: unanswered only
	now := w.tick.Load()
	var waiting []*conn // not the watchdog's scratch list: this runs on the caller's goroutine
	w.mu.Lock()
	for c := range w.conns {
		if c.addr != addr || !c.written.Load() {
			continue
		}
		if !c.answered.Load() {
			waiting = append(waiting, c)
		} else if since := c.readSince.Load(); limit > 0 && since != 0 && since <= now && now-since >= limit {
			waiting = append(waiting, c)
		}
	}
	w.mu.Unlock()
	n := 0
	for _, c := range waiting {
		if c.abort(AbortUnanswered) {
			n++
		}
	}
	return n
}

// Aborted reports whether Abort has run.
func (w *Conns) Aborted() bool { return w.closed.Load() }

func (w *Conns) remove(c *conn) {
	w.mu.Lock()
	delete(w.conns, c)
	w.mu.Unlock()
}

// conn is one upstream connection. fasthttp's HostClient uses a connection for one
// request at a time (write the request, then read the whole response), so a Write marks
// the start of a request and the first bytes read after it are the upstream's first output.
type conn struct {
	net.Conn
	w         *Conns
	readSince atomic.Uint64 // tick at which the pending Read began; 0 = no Read pending
	// deadline is the tick by which the current request's first output must arrive (set
	// by SetReadDeadline with RequestDeadlines; 0 = the fixed first-output timeout).
	deadline atomic.Uint64
	answered atomic.Bool   // response bytes arrived since the last request was written
	written  atomic.Bool   // a request was written (or is being written) on it
	why      atomic.Uint32 // set once when the Conns closes the connection
	addr     string        // the address dialled
}

// SetReadDeadline keeps a request's deadline as the connection's first-output deadline
// with RequestDeadlines (the zero time clears it); otherwise it sets the socket's.
func (c *conn) SetReadDeadline(t time.Time) error {
	if !c.w.perRequest {
		return c.Conn.SetReadDeadline(t) //nolint:wrapcheck // a net.Conn passes its errors through
	}
	if t.IsZero() {
		c.deadline.Store(0)
		return nil
	}
	c.deadline.Store(c.w.tick.Load() + c.w.ticks(max(time.Until(t), time.Nanosecond)))
	return nil
}

// SetWriteDeadline ignores a request's write deadline with RequestDeadlines: fasthttp
// sets it before each request, and arming the socket's timer for it costs every request
// while a request write to a live pylon does not block; otherwise it sets the socket's.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.w.perRequest {
		return nil
	}
	return c.Conn.SetWriteDeadline(t) //nolint:wrapcheck // a net.Conn passes its errors through
}

func (c *conn) Write(b []byte) (int, error) {
	if c.answered.Load() {
		c.answered.Store(false)
	}
	if !c.written.Load() {
		c.written.Store(true)
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		if why := c.why.Load(); why != abortNone {
			return n, AbortError(why)
		}
	}
	return n, err //nolint:wrapcheck // a net.Conn passes its errors through
}

func (c *conn) Read(b []byte) (int, error) {
	c.readSince.Store(c.w.tick.Load())
	n, err := c.Conn.Read(b)
	c.readSince.Store(0)
	if n > 0 && !c.answered.Load() {
		c.answered.Store(true)
	}
	if err != nil {
		if why := c.why.Load(); why != abortNone {
			return n, AbortError(why)
		}
	}
	return n, err //nolint:wrapcheck // a net.Conn passes its errors through
}

func (c *conn) Close() error {
	c.w.remove(c)
	return c.Conn.Close() //nolint:wrapcheck // a net.Conn passes its errors through
}

// abort closes the connection for reason why; it reports false when it was already
// aborted.
func (c *conn) abort(why uint32) bool {
	if !c.why.CompareAndSwap(abortNone, why) {
		return false
	}
	_ = c.Close()
	return true
}

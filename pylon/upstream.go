package pylon

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Why the pylon closed an engine connection itself.
const (
	abortNone uint32 = iota
	abortFirstOutput
	abortStreamIdle
	abortShutdown
)

// abortError is the error a read on an engine connection returns once the pylon has
// closed that connection. The two timeouts report Timeout() == true, so fasthttp's Do
// returns ErrTimeout for them (and its RetryIfErr never resends the request); a shutdown
// abort reads like a connection the engine closed.
type abortError uint32

func (e abortError) Error() string {
	switch uint32(e) {
	case abortFirstOutput:
		return "engine sent no response bytes within the first-output timeout"
	case abortStreamIdle:
		return "engine response stalled longer than the stream idle timeout"
	default:
		return "engine call aborted: the pylon is shutting down"
	}
}

func (e abortError) Timeout() bool { return uint32(e) != abortShutdown }

// errShuttingDown refuses engine connections once a shutdown has aborted the data path.
var errShuttingDown = errors.New("pylon is shutting down: no new engine connections")

// Watchdog granularity: an eighth of the shortest timeout, within [minWatchPeriod, maxWatchPeriod].
const (
	minWatchPeriod = time.Millisecond
	maxWatchPeriod = time.Second
)

// engineConns tracks the data path's connections to the engine and bounds every wait for
// the engine (REFERENCE.md §4.6 item 10):
//   - One watchdog goroutine per pylon ticks every period and closes a connection whose
//     pending read has waited longer than the first-output timeout (no response bytes
//     since the request was written) or the stream idle timeout (after the first bytes).
//     The blocked read then fails: before the response headers fasthttp's Do returns
//     ErrTimeout (the handler answers 504); in a relayed stream the body read fails, the
//     relay reports Finished and the gateway sees the stream cut.
//   - abort (a shutdown past its drain timeout) closes every connection and refuses new
//     ones, so no handler waits for the engine any longer.
//
// The data path pays two atomic stores and two loads per read: no timer, no clock read, no
// allocation. Reads stamp themselves with a coarse tick that only the watchdog advances,
// so a timeout T fires between T and T + 2 periods after the read began (between T and
// T + 1 period when the period divides T, as with the defaults).
type engineConns struct {
	dial       fasthttp.DialFuncWithTimeout
	period     time.Duration
	firstTicks uint64 // first-output timeout in ticks (0 = none)
	idleTicks  uint64 // stream idle timeout in ticks (0 = none)
	onAbort    func(why uint32)
	tick       atomic.Uint64 // starts at 1: a read stamp of 0 means "not reading"

	closed atomic.Bool // set (under mu) by abort

	mu      sync.Mutex
	conns   map[*engineConn]struct{}
	expired []expiredConn // the watchdog's scratch list
}

type expiredConn struct {
	c   *engineConn
	why uint32
}

// newEngineConns wraps dial (nil: fasthttp's TCP dialer). onAbort is called once per
// connection the watchdog closes, with the reason.
func newEngineConns(dial fasthttp.DialFunc, firstOutput, streamIdle time.Duration, onAbort func(why uint32)) *engineConns {
	w := &engineConns{conns: map[*engineConn]struct{}{}, onAbort: onAbort}
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
	shortest := firstOutput
	if shortest == 0 || (streamIdle > 0 && streamIdle < shortest) {
		shortest = streamIdle
	}
	if shortest == 0 {
		return w // no timeouts: no watchdog
	}
	w.period = min(max(shortest/8, minWatchPeriod), maxWatchPeriod)
	// A read stamped s is expired at tick k when k − s ≥ ticks, which guarantees at least
	// (ticks − 1) periods of waiting: hence the +1.
	toTicks := func(d time.Duration) uint64 {
		if d <= 0 {
			return 0
		}
		return uint64((d+w.period-1)/w.period) + 1 //nolint:gosec // d > 0
	}
	w.firstTicks, w.idleTicks = toTicks(firstOutput), toTicks(streamIdle)
	return w
}

// dialTimeout is the HostClient's DialTimeout.
func (w *engineConns) dialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if w.closed.Load() {
		return nil, errShuttingDown
	}
	nc, err := w.dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &engineConn{Conn: nc, w: w}
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

// watch runs the watchdog until stop is closed; it returns at once without timeouts.
func (w *engineConns) watch(stop <-chan struct{}) {
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
func (w *engineConns) check(now uint64) {
	w.mu.Lock()
	for c := range w.conns {
		since := c.readSince.Load()
		if since == 0 {
			continue
		}
		limit, why := w.idleTicks, abortStreamIdle
		if !c.answered.Load() {
			limit, why = w.firstTicks, abortFirstOutput
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

// abort closes every engine connection and refuses new ones (shutdown past the drain
// timeout). It returns the number of connections closed.
func (w *engineConns) abort() int {
	w.mu.Lock()
	w.closed.Store(true)
	all := make([]*engineConn, 0, len(w.conns))
	for c := range w.conns {
		all = append(all, c)
	}
	w.mu.Unlock()
	for _, c := range all {
		c.abort(abortShutdown)
	}
	return len(all)
}

// aborted reports whether abort has run.
func (w *engineConns) aborted() bool { return w.closed.Load() }

func (w *engineConns) remove(c *engineConn) {
	w.mu.Lock()
	delete(w.conns, c)
	w.mu.Unlock()
}

// engineConn is one engine connection. fasthttp's HostClient uses a connection for one
// request at a time (write the request, then read the whole response), so a Write marks
// the start of a request and the first bytes read after it are the engine's first output.
type engineConn struct {
	net.Conn
	w         *engineConns
	readSince atomic.Uint64 // tick at which the pending Read began; 0 = no Read pending
	answered  atomic.Bool   // response bytes arrived since the last request was written
	why       atomic.Uint32 // set once when the pylon closes the connection
}

func (c *engineConn) Write(b []byte) (int, error) {
	if c.answered.Load() {
		c.answered.Store(false)
	}
	return c.Conn.Write(b) //nolint:wrapcheck // a net.Conn passes its errors through
}

func (c *engineConn) Read(b []byte) (int, error) {
	c.readSince.Store(c.w.tick.Load())
	n, err := c.Conn.Read(b)
	c.readSince.Store(0)
	if n > 0 && !c.answered.Load() {
		c.answered.Store(true)
	}
	if err != nil {
		if why := c.why.Load(); why != abortNone {
			return n, abortError(why)
		}
	}
	return n, err //nolint:wrapcheck // a net.Conn passes its errors through
}

func (c *engineConn) Close() error {
	c.w.remove(c)
	return c.Conn.Close() //nolint:wrapcheck // a net.Conn passes its errors through
}

// abort closes the connection for reason why; it reports false when it was already
// aborted.
func (c *engineConn) abort(why uint32) bool {
	if !c.why.CompareAndSwap(abortNone, why) {
		return false
	}
	_ = c.Close()
	return true
}

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
	case fasthttp.StateClosed, fasthttp.StateHijacked:
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

package gateway

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// connWatch enforces the upstream headers timeout (REFERENCE.md §3.6: it bounds the wait
// for a pylon's answer; the stream then runs unbounded) without a deadline per request.
// Each upstream connection notes when a request was written and clears the mark when the
// first bytes of the answer arrive; one sweeper closes connections that have waited longer
// than the timeout, which fails that attempt like a transport error (502 or a fail-over).
// fasthttp's DoTimeout would instead arm two runtime timers per request (often waking the
// network poller) and leave the read deadline on the connection while a stream is relayed,
// cutting every stream longer than the timeout.
type connWatch struct {
	timeout time.Duration
	now     func() time.Time
	start   sync.Once
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	conns   map[*watchedConn]struct{}
}

func newConnWatch(timeout time.Duration, now func() time.Time) *connWatch {
	return &connWatch{timeout: timeout, now: now, stop: make(chan struct{}), done: make(chan struct{}), conns: map[*watchedConn]struct{}{}}
}

// dial wraps dial (nil: fasthttp's TCP dialer) so every upstream connection is watched.
func (w *connWatch) dial(dial fasthttp.DialFunc) fasthttp.DialFunc {
	if dial == nil {
		dial = fasthttp.Dial
	}
	return func(addr string) (net.Conn, error) {
		c, err := dial(addr)
		if err != nil {
			return nil, err
		}
		wc := &watchedConn{Conn: c, w: w}
		w.start.Do(func() { go w.sweep() })
		w.mu.Lock()
		w.conns[wc] = struct{}{}
		w.mu.Unlock()
		return wc, nil
	}
}

// tick is the sweep period: a quarter of the timeout, between 10 ms and 1 s.
func (w *connWatch) tick() time.Duration {
	return min(max(w.timeout/4, 10*time.Millisecond), time.Second)
}

func (w *connWatch) sweep() {
	defer close(w.done)
	t := time.NewTicker(w.tick())
	defer t.Stop()
	var late []*watchedConn
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		now := w.now().UnixNano()
		w.mu.Lock()
		for c := range w.conns {
			if since := c.since.Load(); since != 0 && now-since >= int64(w.timeout) {
				late = append(late, c)
			}
		}
		w.mu.Unlock()
		for _, c := range late {
			_ = c.Close()
		}
		clear(late)
		late = late[:0]
	}
}

// errHeadersTimeout describes an attempt the sweeper ended.
var errHeadersTimeout = errors.New("the pylon sent no answer within --upstream-headers-timeout")

// close stops the sweeper (connections are closed by their pools).
func (w *connWatch) close() {
	w.start.Do(func() { close(w.done) }) // never started: nothing to wait for
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// watchedConn is an upstream connection that tells its connWatch when it waits for an
// answer. A connection carries one request at a time.
type watchedConn struct {
	net.Conn
	w *connWatch
	// since is when the current request was written (unix ns) while no byte of its answer
	// has arrived; 0 otherwise.
	since  atomic.Int64
	closed atomic.Bool
}

func (c *watchedConn) Write(b []byte) (int, error) {
	if c.since.Load() == 0 {
		c.since.Store(c.w.now().UnixNano())
	}
	return c.Conn.Write(b)
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.since.Load() != 0 {
		c.since.Store(0)
	}
	return n, err
}

func (c *watchedConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.w.mu.Lock()
	delete(c.w.conns, c)
	c.w.mu.Unlock()
	return c.Conn.Close()
}

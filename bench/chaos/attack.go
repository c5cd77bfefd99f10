package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// slowlorisResult is what a slowloris attack saw.
type slowlorisResult struct {
	// Opened counts the connections that sent their partial headers, DialErrors the
	// ones that could not even connect.
	Opened, DialErrors int
	// Closed counts the connections the server closed before the wait ended, and Last is
	// the longest of their times from partial headers to close.
	Closed int
	Last   time.Duration
}

// slowlorisHeaders are the partial request headers a stalled connection sends: a request
// line and a few headers, never the blank line that ends them.
const slowlorisHeaders = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: a"

// slowloris opens n connections to addr that each send partial headers and then one more
// header byte a second (so that an idle timeout alone does not close them), and waits up
// to wait after the last one opened for the server to close them. Every connection is
// closed before it returns.
func slowloris(ctx context.Context, addr string, n int, wait time.Duration) slowlorisResult {
	var res slowlorisResult
	type stalled struct {
		conn   net.Conn
		opened time.Time
		closed atomic.Int64 // ns from opened to close; 0 while open
	}
	conns := make([]*stalled, 0, n)
	defer func() {
		for _, s := range conns {
			_ = s.conn.Close()
		}
	}()
	for range n {
		if ctx.Err() != nil {
			return res
		}
		c, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			res.DialErrors++
			continue
		}
		s := &stalled{conn: c, opened: time.Now()}
		conns = append(conns, s)
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := io.WriteString(c, slowlorisHeaders); err != nil {
			s.closed.Store(max(int64(time.Since(s.opened)), 1))
		}
	}
	res.Opened = len(conns)
	deadline := time.Now().Add(wait)
	var wg sync.WaitGroup
	for _, s := range conns {
		if s.closed.Load() != 0 {
			continue
		}
		_ = s.conn.SetReadDeadline(deadline)
		wg.Go(func() {
			buf := make([]byte, 512)
			for {
				// A server may answer (408, 431) before it closes; only the close counts.
				if _, err := s.conn.Read(buf); err != nil {
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Timeout() {
						s.closed.Store(max(int64(time.Since(s.opened)), 1))
					}
					return
				}
			}
		})
	}
	// The trickle: one more header byte a second on every connection still open.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	allClosed := make(chan struct{})
	go func() { wg.Wait(); close(allClosed) }()
trickle:
	for i := 0; time.Now().Before(deadline); i++ {
		select {
		case <-ctx.Done():
			break trickle
		case <-allClosed:
			break trickle
		case <-tick.C:
		}
		for _, s := range conns {
			if s.closed.Load() == 0 {
				_ = s.conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
				_, _ = s.conn.Write([]byte{'a' + byte(i%26)})
			}
		}
	}
	for _, s := range conns {
		_ = s.conn.SetReadDeadline(time.Now()) // wake the readers
	}
	wg.Wait()
	for _, s := range conns {
		if d := time.Duration(s.closed.Load()); d > 0 {
			res.Closed++
			res.Last = max(res.Last, d)
		}
	}
	return res
}

// bodyResult is how one oversized body was answered.
type bodyResult struct {
	// Answer is the response status, or "reset" (the connection broke without an
	// answer), "closed" (closed cleanly without an answer) or "timeout".
	Answer string
	// Sent is how many body bytes were written before the answer or the break.
	Sent int64
}

// bodyChunk is the size of each chunk of an oversized body.
const bodyChunk = 64 << 10

// bodyWriter writes a request's body to w, checking answered between chunks (it stops
// early once the server has answered); it returns the body bytes written.
type bodyWriter func(w *bufio.Writer, answered func() bool) (int64, error)

// exchange sends head (the request line and headers, blank line included) and the body
// written by body on a raw connection to addr while reading the answer at the same
// time: a server that answers before the body is complete (a 413) and then closes the
// connection is heard, as an HTTP client that first writes everything would not. The
// whole exchange is bounded by deadline.
func exchange(ctx context.Context, addr, head string, body bodyWriter, deadline time.Duration) bodyResult {
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return bodyResult{Answer: "refused"}
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	stopOnCancel := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stopOnCancel()
	var answered atomic.Bool
	var sent atomic.Int64
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		w := bufio.NewWriterSize(c, bodyChunk+64)
		if _, err := w.WriteString(head); err != nil {
			return
		}
		n, err := body(w, answered.Load)
		sent.Store(n)
		if err == nil && !answered.Load() {
			_ = w.Flush()
		}
	}()
	resp, rerr := http.ReadResponse(bufio.NewReader(c), nil)
	answered.Store(true)
	res := bodyResult{}
	if rerr == nil {
		res.Answer = strconv.Itoa(resp.StatusCode)
		_ = resp.Body.Close()
	} else {
		res.Answer = errClass(ctx, rerr)
	}
	_ = c.SetDeadline(time.Now()) // unblock the writer
	<-writeDone
	res.Sent = sent.Load()
	return res
}

// errClass names a connection error: "timeout", "closed" (a clean close without an
// answer), "refused" or "reset".
func errClass(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()):
		return "timeout"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	default:
		return "reset"
	}
}

// sendOversized POSTs a chunked JSON chat completion body of size bytes to addr and
// reports the answer.
func sendOversized(ctx context.Context, addr string, size int64, deadline time.Duration) bodyResult {
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	chunk := bytes.Repeat([]byte{'x'}, bodyChunk)
	body := func(w *bufio.Writer, answered func() bool) (int64, error) {
		var sent int64
		writeChunk := func(b []byte) error {
			if _, err := w.WriteString(strconv.FormatInt(int64(len(b)), 16) + "\r\n"); err != nil {
				return err //nolint:wrapcheck // the connection's own error
			}
			if _, err := w.Write(b); err != nil {
				return err //nolint:wrapcheck // the connection's own error
			}
			_, err := w.WriteString("\r\n")
			return err //nolint:wrapcheck // the connection's own error
		}
		if err := writeChunk([]byte(`{"model":"` + Model + `","messages":[{"role":"user","content":"`)); err != nil {
			return sent, err
		}
		for sent < size && !answered() {
			if err := writeChunk(chunk); err != nil {
				return sent, err
			}
			sent += bodyChunk
		}
		if answered() {
			return sent, nil
		}
		if err := writeChunk([]byte(`"}]}`)); err != nil {
			return sent, err
		}
		_, err := w.WriteString("0\r\n\r\n")
		return sent, err //nolint:wrapcheck // the connection's own error
	}
	return exchange(ctx, addr, head, body, deadline)
}

// sendPlain sends method path with a Content-Length body to addr and reports the answer.
func sendPlain(ctx context.Context, addr, method, path string, payload []byte, deadline time.Duration) bodyResult {
	head := method + " " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(payload)) + "\r\nConnection: close\r\n\r\n"
	body := func(w *bufio.Writer, answered func() bool) (int64, error) {
		var sent int64
		for rest := payload; len(rest) > 0 && !answered(); {
			n := min(len(rest), bodyChunk)
			if _, err := w.Write(rest[:n]); err != nil {
				return sent, err //nolint:wrapcheck // the connection's own error
			}
			sent += int64(n)
			rest = rest[n:]
		}
		return sent, nil
	}
	return exchange(ctx, addr, head, body, deadline)
}

// rssSampler records every fleet process's peak RSS until stopped.
type rssSampler struct {
	f     *Fleet
	mu    sync.Mutex
	peaks []int64
	stop  chan struct{}
	done  chan struct{}
}

// sampleRSS starts sampling f's processes every interval.
func sampleRSS(f *Fleet, every time.Duration) *rssSampler {
	s := &rssSampler{f: f, peaks: f.RSSAll(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			now := f.RSSAll()
			s.mu.Lock()
			for i, v := range now {
				s.peaks[i] = max(s.peaks[i], v)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// Stop ends the sampling and returns the peaks in ProcNames order.
func (s *rssSampler) Stop() []int64 {
	close(s.stop)
	<-s.done
	now := s.f.RSSAll()
	for i, v := range now {
		s.peaks[i] = max(s.peaks[i], v)
	}
	return s.peaks
}

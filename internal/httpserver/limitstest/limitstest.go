// Package limitstest drives a server's connection limits from the client side: stalled
// headers and bodies, idle keep-alive connections, connections over the cap and chunked
// bodies over the size limit. Each check asserts on what the client sees (the connection
// closed, the status) with a bound, never on a sleep. Inside a testing/synctest bubble
// over in-memory listeners the timings are exact virtual time; over loopback sockets use
// short timeouts.
package limitstest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// Dial opens a new connection to the server under test.
type Dial func() (net.Conn, error)

// Slack is how much later than its timeout a connection may be closed.
const Slack = 2 * time.Second

func dial(tb testing.TB, d Dial) net.Conn {
	tb.Helper()
	c, err := d()
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	return c
}

// awaitClose reads c until the server closes it and returns how long that took from
// since. It fails the test when the connection is still open past limit (from since).
func awaitClose(tb testing.TB, c net.Conn, since time.Time, limit time.Duration, what string) time.Duration {
	tb.Helper()
	_ = c.SetReadDeadline(since.Add(limit))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		if IsTimeout(err) {
			tb.Fatalf("%s: the connection is still open %v later", what, limit)
		}
		return time.Since(since)
	}
}

// IsTimeout reports whether err is a read or write deadline passing (on a socket or an
// in-memory pipe).
func IsTimeout(err error) bool {
	var ne net.Error
	return (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, fasthttputil.ErrTimeout)
}

// within fails unless got is in [want, want+Slack].
func within(tb testing.TB, what string, got, want time.Duration) {
	tb.Helper()
	if got < want || got > want+Slack {
		tb.Errorf("%s: closed after %v, want %v (up to %v later)", what, got, want, Slack)
	}
}

// HeaderStall checks that a connection that sends nothing, and one that sends half a
// request line and stalls, are both closed after timeout.
func HeaderStall(tb testing.TB, d Dial, timeout time.Duration) {
	tb.Helper()
	for _, tc := range []struct{ name, send string }{
		{"a connection that sends nothing", ""},
		{"half a request line", "POST /v1/chat/comp"},
		{"half a header line", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty"},
	} {
		c := dial(tb, d)
		start := time.Now()
		if tc.send != "" {
			if _, err := io.WriteString(c, tc.send); err != nil {
				tb.Fatalf("%s: write: %v", tc.name, err)
			}
		}
		within(tb, tc.name, awaitClose(tb, c, start, timeout+Slack+time.Second, tc.name), timeout)
		_ = c.Close()
	}
}

// BodyStall checks that a request whose body stalls after the headers (head is the
// request line and headers, ending in the blank line, declaring a longer body than part)
// is closed timeout after the headers, and the same for a chunked body.
func BodyStall(tb testing.TB, d Dial, path string, timeout time.Duration) {
	tb.Helper()
	for _, tc := range []struct{ name, send string }{
		{"a body shorter than its length", "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":"},
		{"a chunked body that stops", "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{\"model\":\r\n"},
	} {
		c := dial(tb, d)
		start := time.Now()
		if _, err := io.WriteString(c, tc.send); err != nil {
			tb.Fatalf("%s: write: %v", tc.name, err)
		}
		within(tb, tc.name, awaitClose(tb, c, start, timeout+Slack+time.Second, tc.name), timeout)
		_ = c.Close()
	}
}

// roundTrip writes req on c and reads one response from r.
func roundTrip(tb testing.TB, c net.Conn, r *bufio.Reader, req string) int {
	tb.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		tb.Fatalf("write: %v", err)
	}
	var resp fasthttp.Response
	if err := resp.Read(r); err != nil {
		tb.Fatalf("reading the answer to %.40q: %v", req, err)
	}
	return resp.StatusCode()
}

// Get is a keep-alive GET request for path.
func Get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }

// Idle checks that a keep-alive connection left idle after a request (req, answered
// with wantStatus) is closed after timeout.
func Idle(tb testing.TB, d Dial, req string, wantStatus int, timeout time.Duration) {
	tb.Helper()
	c := dial(tb, d)
	defer c.Close()
	if st := roundTrip(tb, c, bufio.NewReader(c), req); st != wantStatus {
		tb.Fatalf("idle: the first request got %d, want %d", st, wantStatus)
	}
	start := time.Now()
	within(tb, "an idle keep-alive connection", awaitClose(tb, c, start, timeout+Slack+time.Second, "idle"), timeout)
}

// ConnCap checks that with maxConns connections open (each has had req answered with
// wantStatus) one more is answered 503 or closed without an answer, and that a new
// connection is served again once one of the others is closed. The connections still open
// are closed on return: in a synctest bubble, synctest.Wait before the next connection.
func ConnCap(tb testing.TB, d Dial, req string, wantStatus, maxConns int) {
	tb.Helper()
	open := make([]net.Conn, 0, maxConns)
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	for i := range maxConns {
		c := dial(tb, d)
		open = append(open, c)
		if st := roundTrip(tb, c, bufio.NewReader(c), req); st != wantStatus {
			tb.Fatalf("connection %d of %d: %d, want %d", i+1, maxConns, st, wantStatus)
		}
	}
	extra := dial(tb, d)
	_, _ = io.WriteString(extra, req)
	_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(extra)
	_ = extra.Close()
	switch {
	case IsTimeout(err):
		tb.Fatalf("connection %d over a cap of %d: still open 10 s later (answer so far %.60q)", maxConns+1, maxConns, got)
	case len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 503 "):
		tb.Fatalf("connection %d over a cap of %d: answered %.60q, want 503 or a close", maxConns+1, maxConns, got)
	}
	_ = open[0].Close()
	open = open[1:]
	// The server notices the close on its own time: try a few times, 100 ms apart.
	for try := 0; ; try++ {
		c := dial(tb, d)
		_, _ = io.WriteString(c, req)
		var resp fasthttp.Response
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		err := resp.Read(bufio.NewReader(c))
		_ = c.Close()
		if err == nil && resp.StatusCode() == wantStatus {
			return
		}
		if try == 50 {
			tb.Fatalf("after one of %d connections closed, a new one still gets %d %v", maxConns, resp.StatusCode(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ChunkedOverLimit sends a chunked body of up to total bytes (32 KiB chunks) to path and
// checks that the server answers 413 before the client has written more than limit +
// slack bytes of body. It returns the body bytes written when the answer arrived.
func ChunkedOverLimit(tb testing.TB, d Dial, path string, limit, total, slack int) int {
	tb.Helper()
	c := dial(tb, d)
	defer c.Close()
	head := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		tb.Fatalf("write: %v", err)
	}
	var written atomic.Int64
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", 32<<10, strings.Repeat("a", 32<<10)))
		for written.Load() < int64(total) {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Write(chunk); err != nil {
				return
			}
			written.Add(32 << 10)
		}
	}()
	var resp fasthttp.Response
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Minute))
	err := resp.Read(bufio.NewReader(c))
	at := int(written.Load())
	close(stop)
	_ = c.Close()
	<-wrote
	if err != nil {
		tb.Fatalf("chunked body over the limit: no answer (%v) after %d bytes written", err, at)
	}
	if resp.StatusCode() != fasthttp.StatusRequestEntityTooLarge {
		tb.Errorf("chunked body over the limit: %d %.100q, want 413", resp.StatusCode(), resp.Body())
	}
	if at > limit+slack {
		tb.Errorf("chunked body over the limit: 413 after %d body bytes were written, want at most the limit %d + %d", at, limit, slack)
	}
	return at
}

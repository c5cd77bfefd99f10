package httpserver_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/httpserver/limitstest"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func TestMain(m *testing.M) { mocktest.Main(m) }

// testServer serves a fasthttp server with the limits applied on an in-memory listener:
// /health answers "ok", /stream streams an event every 25 s for 200 s, POST /echo
// answers the body's length and a digest, POST /hold holds its body until release.
type testServer struct {
	s       *fasthttp.Server
	g       *httpserver.Guard
	ln      *fasthttputil.InmemoryListener
	done    chan error
	release chan struct{}
}

func newTestServer(t *testing.T, l httpserver.Limits, maxBody int) *testServer {
	t.Helper()
	ts := &testServer{ln: fasthttputil.NewInmemoryListener(), done: make(chan error, 1), release: make(chan struct{})}
	ts.s = &fasthttp.Server{Handler: ts.handle, MaxRequestBodySize: maxBody, Logger: quiet{}}
	ts.g = httpserver.Apply(ts.s, l, false)
	go func() { ts.done <- ts.s.Serve(ts.ln) }()
	return ts
}

func (ts *testServer) close(t *testing.T) {
	t.Helper()
	if err := ts.s.Shutdown(); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-ts.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	time.Sleep(time.Minute) // the worker pool's cleaner exits (virtual time in a bubble)
}

func (ts *testServer) dial() (net.Conn, error) { return ts.ln.Dial() }

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func (ts *testServer) handle(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/health":
		ctx.SetBodyString("ok")
	case "/stream":
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i := range 8 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				if w.Flush() != nil {
					return
				}
				time.Sleep(25 * time.Second)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
	case "/echo":
		ctx.SetBodyString(digest(ctx.PostBody()))
	case "/hold":
		<-ts.release
		ctx.SetBodyString(digest(ctx.PostBody()))
	default:
		ctx.SetStatusCode(404)
	}
}

func digest(b []byte) string {
	var sum uint64
	for i, c := range b {
		sum = sum*31 + uint64(c) + uint64(i)
	}
	return strconv.Itoa(len(b)) + ":" + strconv.FormatUint(sum, 16)
}

// body returns n bytes of a repeating pattern.
func body(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// The default header, body and idle timeouts close stalled and idle connections at their
// exact (virtual) times, the connection cap refuses one connection more, and a stream that
// sends an event every 25 s for 200 s, longer than every timeout, still completes.
func TestTimeoutsCapAndLongStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := newTestServer(t, httpserver.Limits{MaxConnections: 4}, 1<<20)
		defer ts.close(t)
		limitstest.HeaderStall(t, ts.dial, httpserver.DefaultReadHeaderTimeout)
		limitstest.BodyStall(t, ts.dial, "/echo", httpserver.DefaultBodyReadTimeout)
		limitstest.Idle(t, ts.dial, limitstest.Get("/health"), 200, httpserver.DefaultIdleTimeout)
		synctest.Wait() // earlier tests' connections are closed: they do not count against the cap
		limitstest.ConnCap(t, ts.dial, limitstest.Get("/health"), 200, 4)
		synctest.Wait()
		if n := ts.g.OpenConnections(); n != 0 {
			t.Errorf("%d connections still counted after all closed", n)
		}

		c, _ := ts.dial()
		defer c.Close()
		start := time.Now()
		_, _ = io.WriteString(c, limitstest.Get("/stream"))
		var resp fasthttp.Response
		err := resp.Read(bufio.NewReader(c))
		if err != nil || resp.StatusCode() != 200 || strings.Count(string(resp.Body()), "data: ") != 9 || !bytes.HasSuffix(resp.Body(), []byte("[DONE]\n\n")) {
			t.Fatalf("long stream: %v %d %q", err, resp.StatusCode(), resp.Body())
		}
		if got := time.Since(start); got != 200*time.Second {
			t.Errorf("the stream took %v, want 200s", got)
		}
	})
}

// Limits set through the flags: zero turns a timeout off (a silent connection stays open
// well past the default), and custom values apply.
func TestLimitsFromFlags(t *testing.T) {
	f := httpserver.Flags{ReadHeaderTimeout: 0, BodyReadTimeout: 3 * time.Second, IdleTimeout: 5 * time.Second, MaxConnections: 0}
	l := f.Limits()
	if l.ReadHeaderTimeout >= 0 || l.MaxConnections >= 0 || l.BodyReadTimeout != 3*time.Second {
		t.Fatalf("limits from flags: %+v", l)
	}
	if err := (&httpserver.Flags{IdleTimeout: -1, MaxConnections: -2, WriteTimeout: -time.Second}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "--idle-timeout") || !strings.Contains(err.Error(), "--max-connections") ||
		!strings.Contains(err.Error(), "--write-timeout") {
		t.Errorf("negative flags: %v", err)
	}
	// The write timeout the listeners take: the default for zero, off (0) from a zero flag.
	if got := l.WriteStall(); got != 0 {
		t.Errorf("--write-timeout 0: WriteStall %v, want 0 (off)", got)
	}
	if got := (httpserver.Limits{}).WriteStall(); got != httpserver.DefaultWriteTimeout {
		t.Errorf("zero Limits: WriteStall %v, want the default %v", got, httpserver.DefaultWriteTimeout)
	}
	if got := (&httpserver.Flags{WriteTimeout: 2 * time.Second}).Limits().WriteStall(); got != 2*time.Second {
		t.Errorf("--write-timeout 2s: WriteStall %v", got)
	}
	synctest.Test(t, func(t *testing.T) {
		ts := newTestServer(t, l, 1<<20)
		defer ts.close(t)
		c, _ := ts.dial()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Minute))
		_, err := c.Read(make([]byte, 1))
		if !limitstest.IsTimeout(err) {
			t.Errorf("with the header timeout off a silent connection was closed: %v", err)
		}
		_ = c.Close()
		limitstest.BodyStall(t, ts.dial, "/echo", 3*time.Second)
		limitstest.Idle(t, ts.dial, limitstest.Get("/health"), 200, 5*time.Second)
	})
}

// post sends body to path (chunked when chunked) on a new connection and returns the
// answer's status and body.
func post(t *testing.T, dial limitstest.Dial, path string, b []byte, chunked bool) (int, string) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		w := bufio.NewWriterSize(c, 64<<10)
		if chunked {
			fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", path)
			for rest := b; len(rest) > 0; {
				n := min(len(rest), 10000)
				fmt.Fprintf(w, "%x\r\n%s\r\n", n, rest[:n])
				rest = rest[n:]
			}
			fmt.Fprint(w, "0\r\n\r\n")
		} else {
			fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", path, len(b), b)
		}
		_ = w.Flush()
	}()
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		t.Fatalf("POST %s (%d bytes, chunked %v): %v", path, len(b), chunked, err)
	}
	return resp.StatusCode(), string(resp.Body())
}

// Bodies of every size class reach the handler whole, with and without a length; a body
// over the limit gets 413: a declared length at once, without reading the body.
func TestBodiesArriveWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 6 << 20
		ts := newTestServer(t, httpserver.Limits{}, limit)
		defer ts.close(t)
		for _, n := range []int{0, 1, 100, 8 << 10, 64 << 10, 64<<10 + 1, httpserver.SmallBodyBytes, httpserver.SmallBodyBytes + 1, 3 << 20, limit} {
			for _, chunked := range []bool{false, true} {
				b := body(n)
				if st, got := post(t, ts.dial, "/echo", b, chunked); st != 200 || got != digest(b) {
					t.Errorf("%d bytes (chunked %v): %d %q, want 200 %q", n, chunked, st, got, digest(b))
				}
			}
		}
		for _, chunked := range []bool{false, true} {
			if st, _ := post(t, ts.dial, "/echo", body(limit+1), chunked); st != 413 {
				t.Errorf("limit + 1 (chunked %v): %d, want 413", chunked, st)
			}
		}
		// A declared length over the limit is refused from the headers alone.
		c, _ := ts.dial()
		_, _ = io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
		start := time.Now()
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(c)); err != nil || resp.StatusCode() != 413 || time.Since(start) != 0 {
			t.Errorf("declared length over the limit: %v %d after %v, want 413 at once", err, resp.StatusCode(), time.Since(start))
		}
		_ = c.Close()
		synctest.Wait()
		if n := ts.g.BodyMemory(); n != 0 {
			t.Errorf("large bodies still hold %d bytes after their requests", n)
		}
	})
}

// A chunked body over the limit gets 413 once the limit is crossed: the client has then
// written at most the limit plus what the in-memory pipe buffers.
func TestChunkedBodyOverTheLimitIsCutAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, limit := range []int{1 << 10, 200 << 10, 4 << 20} {
			ts := newTestServer(t, httpserver.Limits{}, limit)
			at := limitstest.ChunkedOverLimit(t, ts.dial, "/echo", limit, 64<<20, 256<<10)
			t.Logf("limit %d: 413 after %d bytes written", limit, at)
			ts.close(t)
		}
	})
}

// Large bodies share the budget: with room for two bodies at the limit a third large body
// waits while both are held by their requests, goes on when one is answered, and a body
// that finds the budget spent for its whole body read timeout gets 503.
func TestLargeBodiesWaitForTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4 << 20
		ts := newTestServer(t, httpserver.Limits{BodyMemoryBytes: 2 * limit}, limit)
		defer ts.close(t)
		type result struct {
			status int
			body   string
		}
		held := make(chan result, 2)
		for range 2 {
			go func() {
				st, b := post(t, ts.dial, "/hold", body(limit), true) // chunked: takes the whole limit
				held <- result{st, b}
			}()
		}
		synctest.Wait()
		if n := ts.g.BodyMemory(); n != 2*limit {
			t.Fatalf("two held bodies hold %d bytes, want %d", n, 2*limit)
		}
		third := make(chan result, 1)
		go func() {
			st, b := post(t, ts.dial, "/echo", body(2<<20), false)
			third <- result{st, b}
		}()
		time.Sleep(30 * time.Second)
		select {
		case r := <-third:
			t.Fatalf("a third large body was served while the budget was spent: %+v", r)
		default:
		}
		ts.release <- struct{}{}
		if r := <-held; r.status != 200 || r.body != digest(body(limit)) {
			t.Errorf("held body: %+v", r)
		}
		if r := <-third; r.status != 200 || r.body != digest(body(2<<20)) {
			t.Errorf("third body after the wait: %+v", r)
		}

		go func() {
			st, b := post(t, ts.dial, "/hold", body(limit), true)
			held <- result{st, b}
		}()
		synctest.Wait()
		start := time.Now()
		st, b := post(t, ts.dial, "/echo", body(3<<20), false)
		if st != 503 || time.Since(start) != httpserver.DefaultBodyReadTimeout {
			t.Errorf("a body that found the budget spent: %d %q after %v, want 503 after %v", st, b, time.Since(start), httpserver.DefaultBodyReadTimeout)
		}
		for range 2 {
			ts.release <- struct{}{}
			if r := <-held; r.status != 200 {
				t.Errorf("held body: %+v", r)
			}
		}
		synctest.Wait()
		if n := ts.g.BodyMemory(); n != 0 {
			t.Errorf("large bodies still hold %d bytes", n)
		}
	})
}

// Eight concurrent 300 MiB chunked bodies to a server with a 64 MiB limit over loopback
// TCP: each gets 413 after about the limit, the heap grows by at most the large-body
// budget plus slack while they are read, and shrinks back afterwards.
func TestHugeChunkedBodiesKeepTheHeapBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("sends about 600 MiB over loopback")
	}
	const limit = 64 << 20
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(digest(ctx.PostBody())) }, MaxRequestBodySize: limit, Logger: quiet{}}
	g := httpserver.Apply(s, httpserver.Limits{}, false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	defer func() {
		_ = s.Shutdown()
		<-done
	}()
	dial := func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) }

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	peak := base
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
		}
	}()
	var wg sync.WaitGroup
	for range 8 {
		// Loopback socket buffers hold a few MiB the server has not read yet.
		wg.Go(func() { limitstest.ChunkedOverLimit(t, dial, "/", limit, 300<<20, 16<<20) })
	}
	wg.Wait()
	close(stop)
	<-sampled
	growth := int64(peak) - int64(base)
	t.Logf("heap in use: %d MiB before, peak %d MiB (+%d MiB)", base>>20, peak>>20, growth>>20)
	if budget := int64(2*limit) + 32<<20; growth > budget {
		t.Errorf("the heap grew by %d MiB, want at most %d MiB (the large-body budget + 32 MiB)", growth>>20, budget>>20)
	}
	if n := g.BodyMemory(); n != 0 {
		t.Errorf("large bodies still hold %d bytes", n)
	}
	// The spare blocks are dropped and the memory handed back a moment after the last
	// large body: poll for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse < base+16<<20 && ms.HeapIdle-ms.HeapReleased < 64<<20 {
			t.Logf("heap in use back to %d MiB, %d MiB idle not released", ms.HeapInuse>>20, (ms.HeapIdle-ms.HeapReleased)>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s later the heap in use is still %d MiB (%d MiB before), %d MiB idle not released", ms.HeapInuse>>20, base>>20, (ms.HeapIdle-ms.HeapReleased)>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

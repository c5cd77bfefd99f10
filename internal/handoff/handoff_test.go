package handoff

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func TestMain(m *testing.M) { mocktest.Main(m) }

// pieces is a Stream of the pieces sent on its channel until it is closed; it records how
// it was closed.
type pieces struct {
	ch     chan string
	rest   string
	waits  []int      // the size of each read that waited for a next piece
	closed chan error // receives CloseWithError's argument
}

func newPieces(p ...string) *pieces {
	s := &pieces{ch: make(chan string, len(p)), closed: make(chan error, 1)}
	for _, x := range p {
		s.ch <- x
	}
	close(s.ch)
	return s
}

func (s *pieces) Read(p []byte) (int, error) {
	if s.rest == "" {
		s.waits = append(s.waits, len(p))
		x, ok := <-s.ch
		if !ok {
			return 0, io.EOF
		}
		s.rest = x
	}
	n := copy(p, s.rest)
	s.rest = s.rest[n:]
	return n, nil
}

func (s *pieces) CloseWithError(err error) error {
	s.closed <- err
	return nil
}

// rig is a fasthttp server on loopback whose handler hands off the stream next returns.
type rig struct {
	srv    *fasthttp.Server
	h      *Server
	addr   string
	mu     sync.Mutex
	next   func() Stream
	ended  chan struct{} // one value per handed-off stream ended
	states chan fasthttp.ConnState
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigWriteStall(t, 0)
}

// newRigWriteStall is newRig with the connections' writes bounded by writeStall (0: not
// bounded), as the servers bound them (relay.Listener).
func newRigWriteStall(t *testing.T, writeStall time.Duration) *rig {
	t.Helper()
	r := &rig{ended: make(chan struct{}, 16), states: make(chan fasthttp.ConnState, 64)}
	r.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			resp := Response(ctx, true)
			resp.Reset()
			resp.SetStatusCode(fasthttp.StatusOK)
			resp.Header.SetContentType("text/event-stream")
			if strings.HasPrefix(string(ctx.Path()), "/json") {
				resp.Header.SetContentType("application/json")
			}
			resp.Header.Set("X-Path", string(ctx.Path()))
			r.mu.Lock()
			st := r.next()
			r.mu.Unlock()
			if !r.h.HandOff(ctx, resp, st) {
				Move(resp, &ctx.Response)
				ctx.Response.SetBodyStream(st, -1)
			}
		},
		IdleTimeout: time.Minute,
		ConnState:   func(_ net.Conn, s fasthttp.ConnState) { r.states <- s },
	}
	r.h = New(r.srv, func(net.Conn) { r.ended <- struct{}{} })
	ln, extra := mocktest.Loopback(t)
	_ = extra.Close() // Loopback's own client connection: not used here
	r.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.srv.Serve(Listener(relay.Listener(ln, false, writeStall)))
	}()
	t.Cleanup(func() {
		r.h.Close()
		_ = r.srv.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.h.Wait(ctx); err != nil {
			t.Errorf("hand-offs still counted after every connection closed: %d", r.h.Active())
		}
		<-done
	})
	return r
}

func (r *rig) serve(next func() Stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next = next
}

func (r *rig) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func request(path string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
}

// answer is an answer read from the wire.
type answer struct {
	status  int
	header  http.Header
	framing []string // transfer encodings
	closes  bool     // Connection: close
	body    string   // dechunked
}

// readAnswer reads one answer and its whole body.
func readAnswer(t *testing.T, br *bufio.Reader) answer {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, framing: resp.TransferEncoding, closes: resp.Close, body: string(b)}
}

// readHead reads an answer's status line and header only.
func readHead(t *testing.T, br *bufio.Reader) int {
	t.Helper()
	var h fasthttp.ResponseHeader
	if err := h.Read(br); err != nil {
		t.Fatal(err)
	}
	return h.StatusCode()
}

// openSlow opens a stream whose pieces the test sends one by one, and reads its head and
// first piece's arrival: the stream is handed off and relaying. setup runs on the client
// connection before the request is sent.
func openSlow(t *testing.T, r *rig, setup func(net.Conn)) (*pieces, net.Conn, *bufio.Reader) {
	t.Helper()
	p := &pieces{ch: make(chan string), closed: make(chan error, 1)}
	r.serve(func() Stream { return p })
	c, br := r.dial(t)
	if setup != nil {
		setup(c)
	}
	if _, err := c.Write([]byte(request("/slow"))); err != nil {
		t.Fatal(err)
	}
	p.ch <- "data: 1\n\n"
	if status := readHead(t, br); status != 200 {
		t.Fatalf("answer: %d", status)
	}
	return p, c, br
}

// readChunk reads one chunk of a chunked body: its data.
func readChunk(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a chunk's size: %v", err)
	}
	var n int
	if _, err := fmt.Sscanf(line, "%x\r\n", &n); err != nil {
		t.Fatalf("chunk size line %q: %v", line, err)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(br, b); err != nil {
		t.Fatalf("reading a chunk of %d bytes: %v", n, err)
	}
	if string(b[n:]) != "\r\n" {
		t.Fatalf("chunk of %d bytes ends with %q", n, b[n:])
	}
	return string(b[:n])
}

// A handed-off stream waits for each next piece reading one byte (it holds no chunk
// buffer while it waits), yet each piece goes out as one chunk; a piece that is a lone
// line end goes out at once, not with the piece after it.
func TestHandedOffStreamWaitsOnOneByte(t *testing.T) {
	r := newRig(t)
	p, c, br := openSlow(t, r, nil)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a chunk held back fails, not hangs
	if got := readChunk(t, br); got != "data: 1\n\n" {
		t.Fatalf("first chunk %q", got)
	}
	p.ch <- "data: 2\n"
	if got := readChunk(t, br); got != "data: 2\n" {
		t.Fatalf("second chunk %q", got)
	}
	p.ch <- "\n"
	if got := readChunk(t, br); got != "\n" {
		t.Fatalf("third chunk %q, want the lone line end", got)
	}
	close(p.ch)
	if got := readChunk(t, br); got != "" {
		t.Fatalf("last chunk %q, want the empty one", got)
	}
	if err := <-p.closed; err != nil {
		t.Errorf("stream closed with %v", err)
	}
	if len(p.waits) != 4 {
		t.Errorf("%d reads waited for a piece, want 4 (3 pieces, then the end): %v", len(p.waits), p.waits)
	}
	for i, n := range p.waits {
		if n != 1 {
			t.Errorf("wait %d read into %d bytes, want 1", i, n)
		}
	}
}

// A streamed body that is not an event stream is relayed read by read: a piece of one
// byte goes out at once, not with the piece after it.
func TestHandedOffOtherBodyRelaysEachRead(t *testing.T) {
	r := newRig(t)
	p := &pieces{ch: make(chan string), closed: make(chan error, 1)}
	r.serve(func() Stream { return p })
	c, br := r.dial(t)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a chunk held back fails, not hangs
	if _, err := c.Write([]byte(request("/json"))); err != nil {
		t.Fatal(err)
	}
	p.ch <- "{"
	if status := readHead(t, br); status != 200 {
		t.Fatalf("answer: %d", status)
	}
	if got := readChunk(t, br); got != "{" {
		t.Fatalf("first chunk %q", got)
	}
	p.ch <- "}"
	close(p.ch)
	if got := readChunk(t, br); got != "}" {
		t.Fatalf("second chunk %q", got)
	}
	if got := readChunk(t, br); got != "" {
		t.Fatalf("last chunk %q, want the empty one", got)
	}
	if err := <-p.closed; err != nil {
		t.Errorf("stream closed with %v", err)
	}
}

// A handed-off stream is written chunked with the handler's header, pieces larger than a
// chunk included; the connection then serves the next requests, pipelined ones too.
func TestHandedOffStreamKeepsTheConnection(t *testing.T) {
	r := newRig(t)
	big := strings.Repeat("b", 3*streamChunk+7)
	made := make(chan *pieces, 8)
	r.serve(func() Stream {
		p := newPieces("data: 1\n\n", big, "data: [DONE]\n\n")
		made <- p
		return p
	})
	c, br := r.dial(t)
	for i, path := range []string{"/a", "/b"} {
		if _, err := c.Write([]byte(request(path))); err != nil {
			t.Fatal(err)
		}
		a := readAnswer(t, br)
		if a.status != 200 || a.header.Get("X-Path") != path || a.header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("answer %d: %d %v", i, a.status, a.header)
		}
		if len(a.framing) != 1 || a.framing[0] != "chunked" {
			t.Errorf("answer %d framed %v, want chunked", i, a.framing)
		}
		if want := "data: 1\n\n" + big + "data: [DONE]\n\n"; a.body != want {
			t.Fatalf("answer %d: body of %d bytes, want %d", i, len(a.body), len(want))
		}
		if err := <-(<-made).closed; err != nil {
			t.Errorf("stream %d closed with %v, want nil", i, err)
		}
	}
	// Two requests in one write: the second waits in fasthttp's reader while the first
	// streams, and is answered after it.
	if _, err := c.Write([]byte(request("/c") + request("/d"))); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/c", "/d"} {
		a := readAnswer(t, br)
		if a.header.Get("X-Path") != path || !strings.HasSuffix(a.body, "data: [DONE]\n\n") {
			t.Fatalf("pipelined %s: got %s, %q", path, a.header.Get("X-Path"), a.body)
		}
	}
	if n := len(made); n != 2 {
		t.Errorf("%d more streams for the 2 pipelined requests", n)
	}
	// A request that asks to close the connection: its answer says so, then it closes.
	if _, err := c.Write([]byte(strings.Replace(request("/e"), "Host: x\r\n", "Host: x\r\nConnection: close\r\n", 1))); err != nil {
		t.Fatal(err)
	}
	if a := readAnswer(t, br); !a.closes || !strings.HasSuffix(a.body, "data: [DONE]\n\n") {
		t.Errorf("Connection: close request: answer closes %t, body of %d bytes", a.closes, len(a.body))
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the Connection: close answer: read %v, want EOF", err)
	}
	for range 5 {
		<-r.ended // each stream ended once
	}
}

// A client that goes away mid-stream: the stream is closed with the write error, the
// connection is closed and reported closed.
func TestHandedOffStreamClientGone(t *testing.T) {
	r := newRig(t)
	p, c, _ := openSlow(t, r, nil)
	if n := r.h.Streams(); n != 1 {
		t.Errorf("Streams while one relays: %d", n)
	}
	_ = c.Close()
	var cerr error
	for cerr == nil {
		select {
		case p.ch <- strings.Repeat("x", 512): // writes fail once the reset arrives
		case cerr = <-p.closed:
			if cerr == nil {
				t.Fatal("closed as finished")
			}
		}
	}
	for s := range r.states { // the connection is reported closed
		if s == fasthttp.StateClosed {
			break
		}
	}
}

// A drain stops new hand-offs (fasthttp writes the stream itself), closes a connection
// waiting for its next request and waits for a stream still relaying.
func TestDrainClosesIdleWaitsForStreams(t *testing.T) {
	r := newRig(t)
	slow, _, br1 := openSlow(t, r, nil)

	r.serve(func() Stream { return newPieces("data: [DONE]\n\n") })
	c2, br2 := r.dial(t)
	if _, err := c2.Write([]byte(request("/quick"))); err != nil {
		t.Fatal(err)
	}
	readAnswer(t, br2)
	<-r.ended // c2 now waits for its next request

	r.h.Close()
	if _, err := br2.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the waiting connection: read %v, want EOF (closed by the drain)", err)
	}
	waited := make(chan struct{})
	go func() {
		_ = r.h.Wait(context.Background())
		close(waited)
	}()
	if n := r.h.Active(); n == 0 {
		t.Error("no hand-off counted while the slow stream relays")
	}
	select {
	case <-waited:
		t.Fatal("Wait returned while a stream was relaying")
	default:
	}
	close(slow.ch)
	if err := <-slow.closed; err != nil {
		t.Errorf("the slow stream closed with %v", err)
	}
	<-waited
	body, _ := io.ReadAll(br1)
	if !strings.HasSuffix(string(body), "0\r\n\r\n") {
		t.Errorf("the slow stream's end: %q", body)
	}

	// No hand-off once draining: the server is still serving, and fasthttp writes it.
	r.serve(func() Stream { return newPieces("data: [DONE]\n\n") })
	c3, br3 := r.dial(t)
	if _, err := c3.Write([]byte(request("/late"))); err != nil {
		t.Fatal(err)
	}
	if a := readAnswer(t, br3); a.status != 200 || a.body != "data: [DONE]\n\n" {
		t.Errorf("during the drain: %d %q", a.status, a.body)
	}
	if n := r.h.Active(); n != 0 {
		t.Errorf("%d hand-offs counted after the drain", n)
	}
}

// A client that stops reading: once its socket buffers are full, the next write fails
// after the write timeout and the stream is closed with that error.
func TestHandedOffStreamClientStopsReading(t *testing.T) {
	r := newRigWriteStall(t, 200*time.Millisecond)
	p, _, _ := openSlow(t, r, func(c net.Conn) {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
	}) // then nothing more is read
	piece := strings.Repeat("x", streamChunk)
	for {
		select {
		case p.ch <- piece:
			continue
		case err := <-p.closed:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("closed with %v, want the write deadline", err)
			}
		}
		break
	}
}

func TestFrameChunk(t *testing.T) {
	for _, n := range []int{1, 15, 16, 255, 256, streamChunk} {
		buf := make([]byte, chunkRoom+streamChunk+2)
		data := strings.Repeat("z", n)
		copy(buf[chunkRoom:], data)
		if got, want := string(frameChunk(buf, n)), fmt.Sprintf("%x\r\n%s\r\n", n, data); got != want {
			t.Errorf("n=%d: %q..., want %q...", n, got[:8], want[:8])
		}
	}
}

// A connection fasthttp closed before the hijack ran has its stream closed and uncounted.
func TestClosedBeforeTheHijack(t *testing.T) {
	s := New(&fasthttp.Server{}, nil)
	if !s.begin() {
		t.Fatal("begin refused")
	}
	st := newPieces()
	c := &Conn{stream: st, handedOff: true}
	s.closed(c)
	if err := <-st.closed; !errors.Is(err, errNotHandedOff) {
		t.Errorf("closed with %v", err)
	}
	if s.Active() != 0 {
		t.Errorf("still counted: %d", s.Active())
	}
	s.closed(c) // once only
	if s.Active() != 0 {
		t.Errorf("counted again: %d", s.Active())
	}
}

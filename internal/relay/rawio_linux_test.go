package relay_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// rawPair returns a connected loopback pair, both with raw reads and writes: the server
// side accepted through RawListener, the client side wrapped by Raw.
func rawPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, nc := mocktest.Loopback(t)
	client = relay.Raw(nc)
	server, err := relay.RawListener{Listener: ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
	})
	for _, c := range []net.Conn{client, server} {
		if _, ok := c.(*relay.RawConn); !ok {
			t.Fatalf("%T is not a *relay.RawConn", c)
		}
	}
	return client, server
}

// Many megabytes one way (far more than the socket buffers: writes come back partial and
// wait in the netpoller), then the writer closes and the reader sees io.EOF.
func TestRawConnCarriesAStreamToEOF(t *testing.T) {
	t.Parallel()
	client, server := rawPair(t)
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	wrote := make(chan error, 1)
	go func() {
		n, err := client.Write(data)
		if err == nil && n != len(data) {
			err = io.ErrShortWrite
		}
		if cerr := client.Close(); err == nil {
			err = cerr
		}
		wrote <- err
	}()
	h := sha256.New()
	buf := make([]byte, 3000)
	total := 0
	for {
		n, err := server.Read(buf)
		h.Write(buf[:n])
		total += n
		if errors.Is(err, io.EOF) {
			if n != 0 {
				t.Errorf("EOF came with %d bytes", n)
			}
			break
		}
		if err != nil {
			t.Fatalf("read after %d bytes: %v", total, err)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatalf("write: %v", err)
	}
	if want := sha256.Sum256(data); total != len(data) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Errorf("read %d bytes (digest mismatch or short); want %d", total, len(data))
	}
}

// Deadlines behave as on a net.Conn: an expired one fails the call with a timeout error.
func TestRawConnHonoursDeadlines(t *testing.T) {
	t.Parallel()
	client, server := rawPair(t)
	if err := server.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := server.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v, want a timeout", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Errorf("read past the deadline: %#v, want a read *net.OpError", err)
	}
	// Data sent before a fresh deadline is read normally.
	if err := server.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(server, got); err != nil || string(got) != "ping" {
		t.Errorf("read %q, %v; want \"ping\"", got, err)
	}
	if err := client.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("late")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("write past the deadline: %v, want a timeout", err)
	}
}

// Errors keep net.Conn's shape: a closed connection is net.ErrClosed, a reset is the errno.
func TestRawConnErrors(t *testing.T) {
	t.Parallel()
	client, server := rawPair(t)
	// The client resets the connection: SO_LINGER 0 makes its close send RST.
	tc := client.(*relay.RawConn).Conn.(*net.TCPConn) //nolint:forcetypeassert // rawPair dialed TCP
	if err := tc.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	// The byte sent before the reset may or may not be readable; the reset is reported.
	if err := server.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil { // a bug fails, never hangs
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	_, err := server.Read(buf)
	if err == nil {
		_, err = server.Read(buf)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after the peer's reset: %v, want ECONNRESET", err)
	}
	if _, err := client.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read on a closed connection: %v, want net.ErrClosed", err)
	}
	if _, err := client.Write(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write on a closed connection: %v, want net.ErrClosed", err)
	}
	if _, err := client.(syscall.Conn).SyscallConn(); err != nil { //nolint:forcetypeassert // a *RawConn
		t.Errorf("SyscallConn: %v", err)
	}
}

// A connection without a socket is returned as it is.
func TestRawLeavesConnsWithoutASocket(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := relay.Raw(a); got != a {
		t.Errorf("Raw(pipe) = %T, want the pipe itself", got)
	}
}

// A read or write allocates nothing (they run once per request and per streamed chunk).
func TestRawConnCallsDoNotAllocate(t *testing.T) {
	client, server := rawPair(t)
	msg, buf := []byte("data: {}\n\n"), make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(server, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per write and read, want 0", allocs)
	}
}

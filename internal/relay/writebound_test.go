package relay_test

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// A connection without raw I/O bounds each piece of a write: a peer that reads a piece
// well within the bound is never cut, however long the whole write takes, and one that
// stops reading fails the write once the bound has passed.
func TestBoundWritesWithoutRawIO(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const bound = 30 * time.Second
		server, client := net.Pipe()
		defer func() { _ = server.Close() }()
		defer func() { _ = client.Close() }()
		w := relay.BoundWrites(server, bound)
		if w == server {
			t.Fatal("BoundWrites returned a net.Pipe end unwrapped")
		}
		const size = 1 << 20 // 16 pieces of 64 KiB
		read := make(chan int, 1)
		go func() {
			buf := make([]byte, 32<<10)
			total := 0
			for total < size {
				time.Sleep(10 * time.Second) // 32 KiB per 10 s: a piece takes 20 s, the write 5 min
				n, err := client.Read(buf)
				total += n
				if err != nil {
					break
				}
			}
			read <- total
		}()
		start := time.Now()
		if n, err := w.Write(make([]byte, size)); err != nil || n != size {
			t.Fatalf("write to a slow reader: %d of %d bytes, %v", n, size, err)
		}
		if took := time.Since(start); took < 5*time.Minute {
			t.Errorf("the write took %v, want about 5 min (the reader's pace)", took)
		}
		if got := <-read; got != size {
			t.Fatalf("the reader got %d bytes", got)
		}

		// Now the peer reads nothing.
		start = time.Now()
		_, err := w.Write([]byte("nobody reads this"))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write to a peer that stopped reading: %v, want a timeout", err)
		}
		if took := time.Since(start); took != bound {
			t.Errorf("the write failed after %v, want %v", took, bound)
		}
	})
}

// BoundWrites leaves a connection unbounded for 0, and the wrapper still exposes the
// socket beneath (a socket peek sees through it), or says there is none.
func TestBoundWritesPassThrough(t *testing.T) {
	t.Parallel()
	_, tcp := mocktest.Loopback(t)
	if got := relay.BoundWrites(tcp, 0); got != tcp {
		t.Errorf("BoundWrites(c, 0) = %T, want c itself", got)
	}
	sc, ok := relay.BoundWrites(tcp, time.Second).(syscall.Conn)
	if !ok {
		t.Fatal("the bounded TCP connection does not expose its socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fds := 0
	if err := rc.Control(func(uintptr) { fds++ }); err != nil || fds != 1 {
		t.Errorf("Control on the socket beneath: %v, ran %d times", err, fds)
	}
	pipe, other := net.Pipe()
	defer func() { _ = pipe.Close() }()
	defer func() { _ = other.Close() }()
	if _, err := relay.BoundWrites(pipe, time.Second).(syscall.Conn).SyscallConn(); err == nil {
		t.Error("a bounded net.Pipe end claims a socket")
	}
}

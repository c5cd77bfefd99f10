package relay

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// With PlainIO (--raw-socket-io=false) the upstream connections keep the dialled
// net.Conn's own reads and writes, and the watchdog still ends a read that waits past the
// first-output timeout and then one that stalls past the stream idle timeout.
func TestConnsPlainIOKeepsTheWatchdog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var aborts []uint32
	w := NewConns(nil, 40*time.Millisecond, 40*time.Millisecond, func(why uint32) { aborts = append(aborts, why) }).PlainIO()
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		w.Watch(stop)
	}()
	dial := func() (*conn, net.Conn) {
		t.Helper()
		nc, err := w.DialTimeout(ln.Addr().String(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := nc.(*conn)
		if !ok {
			t.Fatalf("dialled %T, want *conn", nc)
		}
		if _, raw := c.Conn.(*RawConn); raw {
			t.Error("PlainIO dialled a raw connection")
		}
		if _, tcp := c.Conn.(*net.TCPConn); !tcp {
			t.Errorf("the connection wraps %T, want the dialled *net.TCPConn", c.Conn)
		}
		return c, <-accepted
	}

	// First output: the upstream reads the request and never answers.
	c, peer := dial()
	defer peer.Close()
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Read(make([]byte, 16))
	var ae AbortError
	if !errors.As(err, &ae) || uint32(ae) != AbortFirstOutput || !ae.Timeout() {
		t.Errorf("read without an answer: %v, want the first-output abort", err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Errorf("aborted after %v, before the 40ms first-output timeout", waited)
	}

	// Stream idle: the upstream answers once, then stalls.
	c, peer = dial()
	defer peer.Close()
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write([]byte("first bytes")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "first bytes" {
		t.Fatalf("first read: %q %v", buf[:n], err)
	}
	if _, err := c.Read(buf); !errors.As(err, &ae) || uint32(ae) != AbortStreamIdle {
		t.Errorf("stalled read: %v, want the stream idle abort", err)
	}
	close(stop)
	<-watched // aborts is the watchdog's: read once it has returned
	if len(aborts) != 2 || aborts[0] != AbortFirstOutput || aborts[1] != AbortStreamIdle {
		t.Errorf("aborts reported %v, want first output then stream idle", aborts)
	}
}

// Listener wraps accepted connections for raw I/O only when asked, and bounds their writes
// when asked.
func TestListenerRawOnlyWhenAsked(t *testing.T) {
	ln, _ := mocktest.Loopback(t)
	if got := Listener(ln, false, 0); got != ln {
		t.Errorf("Listener(ln, false, 0) = %T, want ln itself", got)
	}
	if l, ok := Listener(ln, true, 0).(RawListener); !ok || l.Plain {
		t.Errorf("Listener(ln, true, 0) = %#v, want a raw RawListener", l)
	}
	if l, ok := Listener(ln, false, time.Second).(RawListener); !ok || !l.Plain || l.WriteStall != time.Second {
		t.Errorf("Listener(ln, false, 1s) = %#v, want a plain RawListener bounding writes", l)
	}
}

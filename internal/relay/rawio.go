package relay

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// Socket I/O without the Go runtime's blocking-syscall bookkeeping.
//
// A Go syscall.Read or Write on a socket goes through entersyscall/exitsyscall, which is
// there for calls that may block: the runtime hands the P away if the call takes long.
// Sockets under the netpoller are non-blocking, so their reads and writes never block,
// yet entersyscall still wakes the runtime's sysmon thread whenever the process was idle
// (sysmon sleeps deeply while every P is idle, and the first syscall after that wakes it
// with a futex call; it then polls every 20 µs until the process is idle again). A
// router answering one request at a time pays that on each read and write that follows
// a wait: a futex wake in the request's path and a second thread competing for the CPU.
// RawConn makes the same read and write calls as raw syscalls, waiting for readiness in
// the netpoller exactly as net.Conn does (deadlines included), so sysmon stays asleep.
// What sysmon would otherwise do meanwhile (preempt a goroutine running for over 10 ms,
// take the P from a syscall that blocks) resumes at the process's next timer or ordinary
// syscall; these calls neither block nor run long. Measured with `make overhead` (every
// component in its own process): the gateway's added latency fell by about a third and its
// CPU per request by a third (docs/gateway.md, "Raw socket I/O", and
// Performance).

// Listener returns ln with raw reads and writes on its accepted connections when raw is
// set (else plain net.Conn I/O: --raw-socket-io=false), and their writes bounded by
// writeStall (BoundWrites; 0: unbounded).
func Listener(ln net.Listener, raw bool, writeStall time.Duration) net.Listener {
	if !raw && writeStall <= 0 {
		return ln
	}
	return RawListener{Listener: ln, Plain: !raw, WriteStall: writeStall}
}

// RawListener accepts connections with raw reads and writes (unless Plain), their writes
// bounded by WriteStall (BoundWrites).
type RawListener struct {
	net.Listener
	Plain      bool
	WriteStall time.Duration
}

// Accept wraps the accepted connection with Raw and BoundWrites.
func (l RawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err //nolint:wrapcheck // the listener's own error, as servers expect
	}
	if !l.Plain {
		c = Raw(c)
	}
	return BoundWrites(c, l.WriteStall), nil
}

// BoundWrites bounds how long a write to nc may wait for the peer to take any byte, so a
// peer that stops reading cannot hold a writer (and its connection) forever: the write
// fails with a timeout (os.ErrDeadlineExceeded) and the server closes the connection. A
// raw connection (Raw) arms its write deadline only when a write has to wait, again after
// each bit of progress, so a slow reader is never cut and a write that does not wait costs
// nothing (RawConn.SetWriteStall). Any other connection gets a write deadline d ahead for
// every piece of at most boundPiece bytes it writes. d <= 0 returns nc unbounded.
func BoundWrites(nc net.Conn, d time.Duration) net.Conn {
	if d <= 0 {
		return nc
	}
	if s, ok := nc.(interface{ SetWriteStall(d time.Duration) }); ok {
		s.SetWriteStall(d)
		return nc
	}
	return &boundConn{Conn: nc, d: d}
}

// boundPiece is the most a connection without raw I/O writes under one deadline.
const boundPiece = 64 << 10

// boundConn is a connection without raw I/O whose writes are bounded (BoundWrites).
type boundConn struct {
	net.Conn
	d time.Duration
}

func (c *boundConn) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		if err := c.SetWriteDeadline(time.Now().Add(c.d)); err != nil {
			return n, err //nolint:wrapcheck // the connection's own error
		}
		m, err := c.Conn.Write(b[n:min(len(b), n+boundPiece)])
		n += m
		if err != nil {
			return n, err //nolint:wrapcheck // the connection's own error, as a net.Conn's
		}
	}
	return n, nil
}

// SyscallConn exposes the socket beneath, when there is one.
func (c *boundConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNoSocket
	}
	return sc.SyscallConn() //nolint:wrapcheck // a pass-through
}

var errNoSocket = errors.New("relay: the connection has no socket")

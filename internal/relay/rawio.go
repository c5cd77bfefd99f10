package relay

import "net"

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

// Listener returns ln with raw reads and writes on its accepted connections (RawListener)
// when raw is set, else ln itself: plain net.Conn I/O (--raw-socket-io=false).
func Listener(ln net.Listener, raw bool) net.Listener {
	if raw {
		return RawListener{Listener: ln}
	}
	return ln
}

// RawListener accepts connections with raw reads and writes.
type RawListener struct{ net.Listener }

// Accept wraps the accepted connection with Raw.
func (l RawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err //nolint:wrapcheck // the listener's own error, as servers expect
	}
	return Raw(c), nil
}

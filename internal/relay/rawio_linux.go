package relay

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// RawConn is a TCP connection whose reads and writes are raw syscalls on its socket.
type RawConn struct {
	net.Conn
	rc       syscall.RawConn
	readMu   sync.Mutex // one Read at a time owns rd
	rd       rawOp
	writeMu  sync.Mutex // one Write at a time owns wr
	wr       rawOp
	readStep func(fd uintptr) bool // rd.run and writeStep bound once, so a call allocates nothing
	wrStep   func(fd uintptr) bool
	// The write stall bound (SetWriteStall): while set, each wait for the socket after
	// progress (or at the start of a write) arms the write deadline that far ahead;
	// armedAt is the progress it was armed at. Guarded by writeMu.
	writeStall time.Duration
	armedAt    int
	armed      bool
}

// rawOp is one direction's call in progress: the syscall, its buffer and its outcome.
type rawOp struct {
	trap    uintptr // SYS_READ or SYS_WRITE
	buf     []byte
	n       int
	errno   syscall.Errno
	stalled bool
}

// Raw returns nc with raw reads and writes, or nc itself when it exposes no socket.
func Raw(nc net.Conn) net.Conn {
	rc, ok := socketOf(nc)
	if !ok {
		return nc
	}
	c := &RawConn{Conn: nc, rc: rc, rd: rawOp{trap: syscall.SYS_READ}, wr: rawOp{trap: syscall.SYS_WRITE}}
	c.readStep, c.wrStep = c.rd.run, c.writeStep
	return c
}

// socketOf returns nc's socket, when it exposes one.
func socketOf(nc net.Conn) (syscall.RawConn, bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}

// SetWriteStall bounds how long a write may wait for the peer to take any byte: each time
// a write finds the socket's send buffer full it arms the write deadline d ahead (again
// after every bit of progress), and a write that completes clears it. A peer that stops
// reading fails the write with a timeout within d; one that reads slowly never does. It
// costs nothing while writes do not wait. Set it before the connection is used; 0 turns it
// off. The connection then owns its write deadline: one set with SetWriteDeadline is
// cleared by the next write that waits.
func (r *RawConn) SetWriteStall(d time.Duration) { r.writeStall = d }

// writeStep is wr.run, arming the write deadline (SetWriteStall) when the write has to
// wait for the socket.
func (r *RawConn) writeStep(fd uintptr) bool {
	if r.wr.run(fd) {
		return true
	}
	if r.writeStall > 0 && (!r.armed || r.wr.n > r.armedAt) {
		r.armed, r.armedAt = true, r.wr.n
		_ = r.SetWriteDeadline(time.Now().Add(r.writeStall))
	}
	return false
}

// SyscallConn exposes the socket.
func (r *RawConn) SyscallConn() (syscall.RawConn, error) { return r.rc, nil }

// run makes the call: one read, or writes until the whole buffer is written. false asks
// the netpoller to wait until the socket is ready.
func (o *rawOp) run(fd uintptr) bool {
	for {
		rest := o.buf[o.n:]
		m, _, e := syscall.RawSyscall(o.trap, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
		switch e {
		case 0:
			o.n += int(m)
			switch {
			case o.trap == syscall.SYS_READ || o.n == len(o.buf):
				return true
			case m == 0:
				o.stalled = true // a write that wrote nothing (net.Conn reports it the same way)
				return true
			}
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
}

// Read reads like net.Conn.Read.
func (r *RawConn) Read(b []byte) (int, error) {
	n, err := r.call(false, b)
	if err == nil && n == 0 && len(b) > 0 {
		return 0, io.EOF
	}
	return n, err
}

// Write writes all of b like net.Conn.Write.
func (r *RawConn) Write(b []byte) (int, error) { return r.call(true, b) }

// call makes one Read (write false) or Write of b through the RawConn, which holds the
// socket open and waits in the netpoller whenever the step asks to.
func (r *RawConn) call(write bool, b []byte) (int, error) {
	mu, o, step, op := &r.readMu, &r.rd, r.readStep, "read"
	if write {
		mu, o, step, op = &r.writeMu, &r.wr, r.wrStep, "write"
	}
	mu.Lock()
	o.buf, o.n, o.errno, o.stalled = b, 0, 0, false
	var err error
	if write {
		err = r.rc.Write(step)
	} else {
		err = r.rc.Read(step)
	}
	n, errno, stalled := o.n, o.errno, o.stalled
	o.buf = nil
	if write && r.armed {
		r.armed = false
		_ = r.SetWriteDeadline(time.Time{})
	}
	mu.Unlock()
	switch {
	case err != nil:
		return n, r.opError(op, err)
	case errno != 0:
		return n, r.opError(op, os.NewSyscallError(op, errno))
	case stalled:
		return n, r.opError(op, io.ErrUnexpectedEOF)
	}
	return n, nil
}

// opError shapes an error like net.Conn's: a *net.OpError naming the call. err from the
// RawConn is already one (for the "raw-read"/"raw-write" call): its cause is kept.
func (r *RawConn) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: r.LocalAddr(), Addr: r.RemoteAddr(), Err: err}
}

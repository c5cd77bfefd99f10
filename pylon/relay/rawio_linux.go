package relay

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
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
	readStep func(fd uintptr) bool // rd.read and wr.write bound once, so a call allocates nothing
	wrStep   func(fd uintptr) bool
}

// rawOp is one direction's call in progress: its buffer and its outcome.
type rawOp struct {
	buf   []byte
	n     int
	errno syscall.Errno
}

// Raw returns nc with raw reads and writes, or nc itself when it exposes no socket.
func Raw(nc net.Conn) net.Conn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	c := &RawConn{Conn: nc, rc: rc}
	c.readStep, c.wrStep = c.rd.read, c.wr.write
	return c
}

// SyscallConn exposes the socket.
func (r *RawConn) SyscallConn() (syscall.RawConn, error) { return r.rc, nil }

// read makes one read; false asks the netpoller to wait for readability.
func (o *rawOp) read(fd uintptr) bool {
	for {
		m, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(o.buf))), uintptr(len(o.buf)))
		switch e {
		case 0:
			o.n = int(m)
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
}

// write writes all of the buffer; false asks the netpoller to wait for writability.
func (o *rawOp) write(fd uintptr) bool {
	for o.n < len(o.buf) {
		rest := o.buf[o.n:]
		m, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
		switch e {
		case 0:
			o.n += int(m)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
	return true
}

// Read reads like net.Conn.Read.
func (r *RawConn) Read(b []byte) (int, error) {
	r.readMu.Lock()
	r.rd = rawOp{buf: b}
	err := r.rc.Read(r.readStep)
	n, errno := r.rd.n, r.rd.errno
	r.rd.buf = nil
	r.readMu.Unlock()
	switch {
	case err != nil:
		return 0, r.opError("read", err)
	case errno != 0:
		return 0, r.opError("read", os.NewSyscallError("read", errno))
	case n == 0 && len(b) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b like net.Conn.Write.
func (r *RawConn) Write(b []byte) (int, error) {
	r.writeMu.Lock()
	r.wr = rawOp{buf: b}
	err := r.rc.Write(r.wrStep)
	n, errno := r.wr.n, r.wr.errno
	r.wr.buf = nil
	r.writeMu.Unlock()
	switch {
	case err != nil:
		return n, r.opError("write", err)
	case errno != 0:
		return n, r.opError("write", os.NewSyscallError("write", errno))
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

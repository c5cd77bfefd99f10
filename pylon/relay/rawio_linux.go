package relay

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// RawConn is a TCP connection whose reads and writes are raw syscalls on its socket.
type RawConn struct {
	net.Conn
	rc syscall.RawConn
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
	return &RawConn{Conn: nc, rc: rc}
}

// SyscallConn exposes the socket.
func (r *RawConn) SyscallConn() (syscall.RawConn, error) { return r.rc, nil }

func (r *RawConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: r.LocalAddr(), Addr: r.RemoteAddr(), Err: err}
}

// Read reads like net.Conn.Read.
func (r *RawConn) Read(b []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
			switch e {
			case 0:
				n = int(m)
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait for readability in the netpoller
			default:
				errno = e
				return true
			}
		}
	})
	switch {
	case err != nil:
		var oe *net.OpError
		if errors.As(err, &oe) {
			oe.Op = "read"
			return 0, oe
		}
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
	var n int
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			rest := b[n:]
			m, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
			switch e {
			case 0:
				n += int(m)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait for writability in the netpoller
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		var oe *net.OpError
		if errors.As(err, &oe) {
			oe.Op = "write"
			return n, oe
		}
		return n, r.opError("write", err)
	case errno != 0:
		return n, r.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

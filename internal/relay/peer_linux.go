package relay

import (
	"errors"
	"net"
	"syscall"
)

// PeerClosed reports whether the other end of c has closed the connection (or reset it),
// without reading from it: a non-blocking MSG_PEEK of one byte that finds the end of the
// stream. Data waiting to be read (a pipelined request) counts as open. A connection that
// exposes no socket reports false, as does any error but a reset. It costs one syscall; a
// handler waiting for something else (the pylon holding a request back) polls it.
func PeerClosed(c net.Conn) bool {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS: the socket underneath
		c = tc.NetConn()
	}
	rc, ok := socketOf(c)
	if !ok {
		return false
	}
	closed := false
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = (n == 0 && err == nil) || errors.Is(err, syscall.ECONNRESET)
		return true // never wait for the socket
	})
	return closed
}

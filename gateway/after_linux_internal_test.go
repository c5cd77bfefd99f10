package gateway

import (
	"net"
	"syscall"
	"testing"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// Client connections are accepted with raw socket I/O (docs/gateway.md, "Raw socket I/O"):
// losing the wrapper would silently bring back a sysmon wake-up on every read and write.
// With --raw-socket-io=false the accepted connection is the listener's own *net.TCPConn.
// Either way clientGone must be able to peek through SyscallConn.
func TestClientConnectionsIO(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  bool
		want func(net.Conn) bool
	}{
		{"raw", true, func(c net.Conn) bool { _, ok := c.(*relay.RawConn); return ok }},
		{"plain", false, func(c net.Conn) bool { _, ok := c.(*net.TCPConn); return ok }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, _ := mocktest.Loopback(t)
			c, err := clientListener{Listener: ln, raw: tc.raw}.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cc, ok := c.(*clientConn)
			if !ok {
				t.Fatalf("accepted %T, want *clientConn", c)
			}
			if !tc.want(cc.Conn.Conn) {
				t.Errorf("the client connection wraps %T", cc.Conn.Conn)
			}
			if _, err := cc.SyscallConn(); err != nil {
				t.Errorf("SyscallConn (clientGone peeks through it): %v", err)
			}
		})
	}
}

// The admin listener's connections are raw too (unless --raw-socket-io=false): each pylon
// heartbeat is a read and a write after an idle second.
func TestAdminConnectionsIO(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noRaw bool
		want  func(net.Conn) bool
	}{
		{"raw", false, func(c net.Conn) bool { _, ok := c.(*relay.RawConn); return ok }},
		// plain: not raw, its writes bounded (--write-timeout) by a wrapper that still
		// exposes the socket
		{"plain", true, func(c net.Conn) bool {
			_, raw := c.(*relay.RawConn)
			_, socket := c.(syscall.Conn)
			return !raw && socket
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, _ := mocktest.Loopback(t)
			g := &Gateway{cfg: Config{NoRawSocketIO: tc.noRaw}}
			c, err := g.adminListener(ln).Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !tc.want(c) {
				t.Errorf("the admin connection is a %T", c)
			}
		})
	}
}

package gateway

import (
	"net"
	"testing"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// Client connections are accepted with raw socket I/O (docs/gateway.md, "Raw socket I/O"): losing
// the wrapper would silently bring back a sysmon wake-up on every read and write.
func TestClientConnectionsUseRawIO(t *testing.T) {
	ln, _ := mocktest.Loopback(t)
	c, err := clientListener{Listener: ln, raw: true}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc, ok := c.(*clientConn)
	if !ok {
		t.Fatalf("accepted %T, want *clientConn", c)
	}
	if _, ok := cc.Conn.(*relay.RawConn); !ok {
		t.Errorf("the client connection wraps %T, want *relay.RawConn", cc.Conn)
	}
	if _, err := cc.SyscallConn(); err != nil {
		t.Errorf("SyscallConn (clientGone peeks through it): %v", err)
	}
}

// With --raw-socket-io=false the accepted connection is the listener's own *net.TCPConn,
// still reachable for clientGone's peek.
func TestClientConnectionsPlainIO(t *testing.T) {
	ln, _ := mocktest.Loopback(t)
	c, err := clientListener{Listener: ln, raw: false}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc, ok := c.(*clientConn)
	if !ok {
		t.Fatalf("accepted %T, want *clientConn", c)
	}
	if _, ok := cc.Conn.(*net.TCPConn); !ok {
		t.Errorf("the client connection wraps %T, want *net.TCPConn", cc.Conn)
	}
	if _, err := cc.SyscallConn(); err != nil {
		t.Errorf("SyscallConn (clientGone peeks through it): %v", err)
	}
}

package gateway

import (
	"net"
	"testing"

	"github.com/switchyard/switchyard/pylon/relay"
)

// Client connections are accepted with raw socket I/O (README "Raw socket I/O"): losing
// the wrapper would silently bring back a sysmon wake-up on every read and write.
func TestClientConnectionsUseRawIO(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := clientListener{ln}.Accept()
		accepted <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := <-accepted
	if c == nil {
		t.Fatal("accept failed")
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

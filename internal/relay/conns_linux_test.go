package relay

import (
	"testing"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// Upstream connections (the gateway's pool to pylons, the pylon's to its engine) are
// dialled with raw socket I/O.
func TestConnsDialRawConnections(t *testing.T) {
	ln, _ := mocktest.Loopback(t)
	w := NewConns(nil, 0, 0, func(uint32) {})
	nc, err := w.DialTimeout(ln.Addr().String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, ok := nc.(*conn)
	if !ok {
		t.Fatalf("dialled %T, want *conn", nc)
	}
	if _, ok := c.Conn.(*RawConn); !ok {
		t.Errorf("the upstream connection wraps %T, want *RawConn", c.Conn)
	}
}

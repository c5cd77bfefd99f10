package relay

import (
	"net"
	"testing"
	"time"
)

// PeerClosed tells a connection whose client has gone from one that is open, idle or with
// data waiting, over real loopback TCP and through the raw-I/O wrapper, without reading.
func TestPeerClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	server := Raw(accepted)
	defer server.Close()
	if PeerClosed(server) {
		t.Error("an idle open connection reads as closed")
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = client.Close()
	// The byte and the FIN are both on their way: while the byte waits, the connection
	// reads as open (a pipelined request), and PeerClosed leaves the byte where it is.
	if PeerClosed(server) {
		t.Error("a connection with data waiting reads as closed")
	}
	buf := make([]byte, 2)
	if n, _ := server.Read(buf); n != 1 || buf[0] != 'x' {
		t.Errorf("PeerClosed consumed data: read %q", buf[:n])
	}
	waitFor(t, func() bool { return PeerClosed(server) }, "the client's close to be seen")
}

// waitFor polls cond every millisecond for up to 5 s: it waits for the kernel to deliver
// a loopback segment, and fails the test if that never happens.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

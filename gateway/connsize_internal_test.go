package gateway

import (
	"testing"
	"unsafe"
)

// Every client connection carries a clientConn for its whole life, an open stream's
// included: it is 1 152 bytes (the allocator's 1 152-byte size class), which the
// stream-memory figures in docs/perf count on. A field that grows it takes every connection
// into the next class (1 280 bytes, or 1 408); keep rarely used state behind a pointer, as
// the access-log record is.
func TestClientConnFitsItsSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are those of a 64-bit platform")
	}
	if n := unsafe.Sizeof(clientConn{}); n > 1152 {
		t.Errorf("clientConn is %d bytes, over the 1 152-byte size class", n)
	}
}

//go:build !linux

package relay

import "net"

// Raw returns nc: raw socket I/O is implemented on Linux only.
func Raw(nc net.Conn) net.Conn { return nc }

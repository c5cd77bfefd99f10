package pylon

import "time"

// engineCheckTimeout bounds engineDown's check.
const engineCheckTimeout = 250 * time.Millisecond

// engineCheck is the request engineDown sends: any answer at all shows the engine lives
// (a TLS engine answers a plain request too, with an error).
var engineCheck = []byte("GET /health HTTP/1.1\r\nHost: engine\r\nConnection: close\r\n\r\n")

// engineDown reports whether the engine is down right now. It is asked only after an
// engine call failed without a response byte and without a timeout, to tell an engine
// that died (killed, crashed: the request died with it, and another backend should take
// it) from one that merely closed a connection. A connection alone proves nothing: the
// kernel still accepts connections for a process being torn down. So the check sends a
// request on a new connection and wants the first byte of an answer within
// engineCheckTimeout.
func (p *Pylon) engineDown() bool {
	c, err := p.engine.DialTimeout(p.client.Addr, engineCheckTimeout)
	if err != nil {
		return true
	}
	defer func() { _ = c.Close() }()
	if err := c.SetDeadline(time.Now().Add(engineCheckTimeout)); err != nil {
		return true
	}
	if _, err := c.Write(engineCheck); err != nil {
		return true
	}
	var b [1]byte
	n, _ := c.Read(b[:])
	return n == 0
}

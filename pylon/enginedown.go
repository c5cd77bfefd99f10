package pylon

import "time"

// engineCheckTimeout bounds engineDown's connection attempt.
const engineCheckTimeout = 250 * time.Millisecond

// engineDown reports whether the engine refuses new connections right now. It is asked
// only after an engine call failed without a response byte and without a timeout, to tell
// an engine that died (killed, crashed: the request died with it, and another backend
// should take it) from one that merely closed a connection.
func (p *Pylon) engineDown() bool {
	c, err := p.engine.DialTimeout(p.client.Addr, engineCheckTimeout)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}

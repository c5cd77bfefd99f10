package engine

// Once runs one poll (the tests drive the poller without its timer).
func (p *Poller) Once() error { return p.once() }

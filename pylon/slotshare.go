package pylon

import "time"

// waitShare waits while the generation actor holds the admitted request id back from the
// engine, its pylon's own requests there filling its slot share (genActor.holdPastShare):
// until one of them finishes, the generation stops, or Config.Admission.SlotShareWait
// passes (then it goes on regardless), and records the wait. hold nil: no wait.
func (p *Pylon) waitShare(g *generation, id string, hold chan struct{}) {
	if hold == nil {
		return
	}
	p.held.Add(1)
	defer p.held.Add(-1)
	start := time.Now()
	timer := time.NewTimer(p.cfg.Admission.SlotShareWait)
	defer timer.Stop()
	released := true
	select {
	case <-hold:
	case <-g.done:
	case <-timer.C:
		released = false
		p.sys.Root.Send(g.pid, &holdExpired{id: id})
	}
	p.metrics.shareHeld(time.Since(start), released)
}

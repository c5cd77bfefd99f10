package pylon

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/relay"
)

// holdClientCheck is how often a held request checks that its client (the gateway) is
// still there: a gateway that gave up on the attempt (its first-byte deadline, or the
// pylon seen unresponsive) has closed the connection and retried elsewhere.
const holdClientCheck = 250 * time.Millisecond

// holdOutcome is how a hold ended (the outcome label of slot_share_holds_total).
type holdOutcome uint8

const (
	holdReleased   holdOutcome = iota // one of the pylon's own requests at the engine ended
	holdTimeout                       // Config.Admission.SlotShareWait passed: it goes on
	holdClientGone                    // the client closed the connection: it is dropped
)

// waitShare waits while the generation actor holds the admitted request id back from the
// engine, its pylon's own requests there filling its slot share (genActor.holdPastShare):
// until one of them finishes, the generation stops, or Config.Admission.SlotShareWait
// passes (then it goes on regardless), and records the wait. hold nil: no wait. It
// reports true when the client went away meanwhile: the request must not reach the
// engine (its hold is dropped; the caller ends it).
func (p *Pylon) waitShare(ctx *fasthttp.RequestCtx, g *generation, id string, hold chan struct{}) (gone bool) {
	if hold == nil {
		return false
	}
	p.held.Add(1)
	defer p.held.Add(-1)
	start := time.Now()
	timer := time.NewTimer(p.cfg.Admission.SlotShareWait)
	defer timer.Stop()
	check := time.NewTicker(holdClientCheck)
	defer check.Stop()
	outcome := holdReleased
wait:
	for {
		select {
		case <-hold:
			break wait
		case <-g.done:
			break wait
		case <-timer.C:
			outcome = holdTimeout
			p.sys.Root.Send(g.pid, &holdExpired{id: id})
			break wait
		case <-check.C:
			if p.clientGone(ctx) {
				outcome = holdClientGone
				p.sys.Root.Send(g.pid, &holdExpired{id: id})
				break wait
			}
		}
	}
	p.metrics.shareHeld(time.Since(start), outcome)
	return outcome == holdClientGone
}

// peerClosed is the default Deps.ClientGone: the connection's other end has closed it.
func peerClosed(ctx *fasthttp.RequestCtx) bool { return relay.PeerClosed(ctx.Conn()) }

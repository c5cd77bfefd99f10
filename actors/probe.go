package actors

import (
	"github.com/asynkron/protoactor-go/actor"
)

// Probe is a test actor that forwards every user message it receives to C.
type Probe struct {
	PID *actor.PID
	C   chan any
}

// NewProbe spawns a probe in sys with a buffer of n messages.
func NewProbe(sys *actor.ActorSystem, n int) *Probe {
	p := &Probe{C: make(chan any, n)}
	p.PID = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
		default:
			p.C <- c.Message()
		}
	}))
	return p
}

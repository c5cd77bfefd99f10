package actors_test

import (
	"github.com/asynkron/protoactor-go/actor"
)

// probe is a test actor that forwards every user message it receives to c.
type probe struct {
	pid *actor.PID
	c   chan any
}

// newProbe spawns a probe in sys with a buffer of n messages.
func newProbe(sys *actor.ActorSystem, n int) *probe {
	p := &probe{c: make(chan any, n)}
	p.pid = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
		default:
			p.c <- c.Message()
		}
	}))
	return p
}

package lb

import (
	"fmt"
	"time"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Balancer chooses among the candidates of one routing target. Implementations keep
// per-instance state and are not safe for concurrent use.
type Balancer interface {
	// Decide answers one routing attempt of r on s, elapsed after the request arrived.
	Decide(s *Snapshot, r *Request, elapsed time.Duration) Decision
}

// Rand is the randomness a balancer needs; *math/rand/v2.Rand satisfies it.
type Rand interface {
	// IntN returns a uniform integer in [0, n); n > 0.
	IntN(n int) int
}

// constructors is the registry of balancers by algorithm.
var constructors = map[lbconfig.Algorithm]func(lbconfig.Entry, Rand) Balancer{
	lbconfig.PowerOfN:           newPowerOfN,
	lbconfig.RoundRobin:         func(lbconfig.Entry, Rand) Balancer { return &roundRobin{} },
	lbconfig.Random:             func(_ lbconfig.Entry, rng Rand) Balancer { return &random{rng: rng} },
	lbconfig.WaitAndWiden:       func(e lbconfig.Entry, rng Rand) Balancer { return newWaitAndWiden(e, rng) },
	lbconfig.Pulsar:             func(e lbconfig.Entry, _ Rand) Balancer { return newPulsar(e) },
	lbconfig.PulsarWaitAndWiden: newPulsarWaitAndWiden,
}

// New builds the balancer of entry e with randomness rng. It validates e first and never
// panics on a bad entry.
func New(e lbconfig.Entry, rng Rand) (Balancer, error) {
	if rng == nil {
		return nil, fmt.Errorf("lb: %s: nil Rand", e.Algorithm)
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("lb: %w", err)
	}
	c, ok := constructors[e.Algorithm]
	if !ok {
		return nil, fmt.Errorf("lb: unknown algorithm %v", e.Algorithm)
	}
	return c(e, rng), nil
}

package dispatch

import "github.com/asynkron/protoactor-go/actor"

// StateRequestForTest is the message that asks a scheduler for its State.
func StateRequestForTest() any { return stateRequest{} }

// Ensure returns the scheduler of t, spawning it on first use, for tests that drive a
// scheduler without backend actors. It does not attach: a target only Ensure made is
// never collected.
func (d *Directory) Ensure(t Target) *actor.PID {
	if pid := d.Lookup(t); pid != nil {
		return pid
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.entryLocked(t).pid
}

// PrefillWork is prefillWork.
func PrefillWork(input uint64, cached float64) (uint64, bool) { return prefillWork(input, cached) }

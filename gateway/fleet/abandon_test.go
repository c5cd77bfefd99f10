package fleet_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/fleet"
)

// abandonRig is a fleet whose health probes follow a script (one result a second) and
// that records every OnUnresponsive call by backend id.
type abandonRig struct {
	*rig
	mu        sync.Mutex
	script    []error // the probe results in turn; past the end, probes pass
	probes    int
	abandoned []string
	stalled   []time.Duration // each call's stalled argument
}

var (
	errSilent = errors.New("no answer within the probe timeout")
	err5xx    = errors.Join(fleet.ErrProbeAnswered, errors.New("status 503"))
)

func newAbandonRig(t *testing.T, script ...error) *abandonRig {
	t.Helper()
	r := &abandonRig{script: script}
	sys, dir, f := fleet.NewTestFleetWith(t, fleet.Deps{
		Probe: func(context.Context, *fasthttp.HostClient, string) (time.Duration, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.probes++
			if r.probes <= len(r.script) {
				return 0, r.script[r.probes-1]
			}
			return time.Millisecond, nil
		},
		ProbeInterval:    time.Second,
		DefaultHeartbeat: time.Second, MinExpiry: 3 * time.Second,
		OnUnresponsive: func(b *fleet.Backend, stalled time.Duration) int {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.abandoned = append(r.abandoned, b.ID)
			r.stalled = append(r.stalled, stalled)
			return 1
		},
	})
	r.rig = &rig{sys: sys, dir: dir, fleet: f}
	return r
}

func (r *abandonRig) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.abandoned...)
}

// A backend's waiting requests are abandoned only when its pylon is shown unresponsive:
// two health probes in a row without any answer (a 5xx is an answer and resets the run),
// or an expiry. Each abandonment moves Backend.Abandoned, which the proxy reads to tell an
// abandoned attempt from a refused one.
func TestUnresponsiveBackendIsAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Probes at 0 s, 1 s, …: silent, 5xx, silent, passes, silent, silent.
		r := newAbandonRig(t, errSilent, err5xx, errSilent, nil, errSilent, errSilent)
		r.register(t, registration("p1", 60_000, "m"))
		b := r.fleet.Get("p1")
		time.Sleep(4*time.Second + time.Millisecond) // probes 1–5
		synctest.Wait()
		if got := r.calls(); len(got) != 0 || b.Abandoned() != 0 {
			t.Fatalf("after silent, 5xx, silent, pass, silent: abandoned %v (%d), want none", got, b.Abandoned())
		}
		time.Sleep(time.Second) // probe 6: the second silent one in a row
		synctest.Wait()
		if got := r.calls(); len(got) != 1 || got[0] != "p1" || b.Abandoned() != 1 || r.stalled[0] != 0 {
			t.Fatalf("after two silent probes in a row: abandoned %v (%d, stalled %v), want [p1] once, unanswered requests only", got, b.Abandoned(), r.stalled)
		}
	})
}

// An expired backend (its heartbeats stopped) has its waiting requests abandoned; one that
// deregisters is draining them and keeps them.
func TestExpiredBackendIsAbandonedDeregisteredIsNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newAbandonRig(t)
		r.register(t, registration("gone", 1000, "m"))
		r.register(t, registration("draining", 60_000, "m"))
		r.fleet.Deregister("draining")
		synctest.Wait()
		if got := r.calls(); len(got) != 0 {
			t.Fatalf("after a deregistration: abandoned %v, want none", got)
		}
		gone := r.fleet.Get("gone")
		time.Sleep(3*time.Second + time.Millisecond) // three missed heartbeats
		synctest.Wait()
		if got := r.calls(); len(got) != 1 || got[0] != "gone" || gone.Abandoned() != 1 || r.fleet.Get("gone") != nil || r.stalled[0] != 1500*time.Millisecond {
			t.Fatalf("after the expiry: abandoned %v (%d, stalled %v), want [gone], with streams silent 1.5 s (half the 3 s since its last heartbeat)", got, gone.Abandoned(), r.stalled)
		}
	})
}

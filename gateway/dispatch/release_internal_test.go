package dispatch

import (
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/actors"
)

type quietObserver struct{}

func (quietObserver) Rejected(Target, Reason) {}
func (quietObserver) Parked(Target, int)      {}

// releaseRig is a directory whose memory releases are counted instead of done.
func releaseRig(t *testing.T, releaseAfter int) (*Directory, *atomic.Int32) {
	t.Helper()
	sys := actors.NewSystem(slog.New(slog.DiscardHandler))
	d := NewDirectory(sys, Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: quietObserver{}, CollectGrace: time.Second, ReleaseAfter: releaseAfter})
	var releases atomic.Int32
	d.release = func() { releases.Add(1) }
	t.Cleanup(func() {
		d.Stop()
		time.Sleep(time.Minute)
	})
	return d, &releases
}

func idleTargets(d *Directory, prefix string, n int) {
	for i := range n {
		tg := Target{Model: prefix + strconv.Itoa(i)}
		d.Attach(tg)
		d.Detach(tg)
	}
}

// Memory goes back to the system once per mass collection: when the threshold is reached
// and no other target is still waiting out its grace, not per sweep or per batch, and
// never below the threshold or when disabled.
func TestReleaseOncePerMassCollection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, releases := releaseRig(t, 3)
		idleTargets(d, "a", 2)
		time.Sleep(500 * time.Millisecond)
		idleTargets(d, "b", 1)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if n := d.Len(); n != 1 || releases.Load() != 0 {
			t.Fatalf("first sweep: %d targets left, %d releases; want 1 left, none while b waits", n, releases.Load())
		}
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if d.Len() != 0 || releases.Load() != 1 {
			t.Fatalf("burst over: %d targets, %d releases; want 0 and 1", d.Len(), releases.Load())
		}
		idleTargets(d, "c", 2)
		time.Sleep(time.Second)
		synctest.Wait()
		if releases.Load() != 1 {
			t.Errorf("2 targets (below 3) released memory: %d releases", releases.Load())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		d, releases := releaseRig(t, 1000)
		idleTargets(d, "m", 3*sweepBatch) // several batches, one burst
		time.Sleep(time.Second)
		synctest.Wait()
		if d.Len() != 0 || releases.Load() != 1 {
			t.Errorf("burst of %d: %d targets left, %d releases; want 0 and 1", 3*sweepBatch, d.Len(), releases.Load())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		d, releases := releaseRig(t, -1)
		idleTargets(d, "m", 2000)
		time.Sleep(time.Second)
		synctest.Wait()
		if d.Len() != 0 || releases.Load() != 0 {
			t.Errorf("disabled: %d targets left, %d releases; want 0 and 0", d.Len(), releases.Load())
		}
	})
}

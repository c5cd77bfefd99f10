package dispatch_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// The scheduler keeps each backend's peak input throughput: under the default
// rendezvous_weight (max-input-tps) a key's pulsar primary stays put when traffic lowers
// its mean throughput; under last-mean-input-tps it moves.
func TestPulsarPrimaryKeepsItsPeak(t *testing.T) {
	primaries := func(t *testing.T, w lbconfig.RendezvousWeight) (before, after map[string]string) {
		t.Helper()
		before, after = map[string]string{}, map[string]string{}
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t)
			for _, id := range []string{"c0", "c1", "c2"} {
				f.backend(id, time.Millisecond, load.Load{InputTPS: 1000}, 1<<40)
			}
			e := lbconfig.DefaultEntry(lbconfig.Pulsar)
			e.RendezvousWeight = w
			route := func(key string) string {
				out := <-f.route(e, 1, func(p *dispatch.Pending) { p.Req.AffinityKey = key }).Mailbox
				return out.BackendID
			}
			for i := range 30 {
				key := fmt.Sprint("k", i)
				before[key] = route(key)
			}
			f.backend("c0", time.Millisecond, load.Load{InputTPS: 20}, 1<<40) // busy: its mean drops
			for i := range 30 {
				key := fmt.Sprint("k", i)
				after[key] = route(key)
			}
		})
		return before, after
	}
	before, after := primaries(t, lbconfig.WeightDefault)
	for k := range before {
		if before[k] != after[k] {
			t.Errorf("max-input-tps: key %s moved from %s to %s when c0's mean dropped", k, before[k], after[k])
		}
	}
	before, after = primaries(t, lbconfig.WeightLastMeanInputTPS)
	moved := 0
	for k := range before {
		if before[k] != after[k] {
			moved++
		}
	}
	if moved == 0 {
		t.Error("last-mean-input-tps: no key moved when c0's mean dropped to 2 %")
	}
}

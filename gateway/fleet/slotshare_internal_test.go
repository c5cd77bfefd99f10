package fleet

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
	"github.com/switchyard/switchyard/internal/wire"
)

// A registration's engine slot share reaches the scheduler: of two backends of one
// cluster whose engine has free slots, the one whose own requests fill its share is passed
// over; without shares round-robin starts at the first.
func TestRegisteredSlotShareRoutes(t *testing.T) {
	for _, tc := range []struct {
		share uint64
		want  string
	}{{share: 2, want: "p2"}, {share: 0, want: "p1"}} {
		synctest.Test(t, func(t *testing.T) {
			sys, dir, f := NewTestFleet(t)
			for _, b := range []struct {
				id  string
				own uint64
			}{{"p1", 2}, {"p2", 0}} {
				reg := wire.Registration{
					ID: b.id, URL: "http://" + b.id + ":18080", ClusterID: "c1", HeartbeatMs: 60_000, EngineSlotShare: tc.share,
					Models: map[string]wire.Model{"a": {Status: wire.StatusActive, Generation: 1, Stats: wire.Stats{
						LastMeanInputTPS: 1000, MaxEngineConcurrency: 4, NumRunningQueries: 2, OutputGenerationQueries: b.own,
					}}},
				}
				if err := f.Register(reg); err != nil {
					t.Fatal(err)
				}
				f.ReportRTT(b.id, time.Millisecond)
			}
			synctest.Wait()
			e := lbconfig.DefaultEntry(lbconfig.RoundRobin)
			p := dispatch.NewPending(time.Now())
			p.Entry = &e
			sys.Root.Send(dir.Lookup(dispatch.Target{Model: "a"}), dispatch.Route{P: p})
			if out := <-p.Mailbox; out.Kind != dispatch.OutcomeGranted || out.BackendID != tc.want {
				t.Errorf("share %d: %+v, want %s", tc.share, out, tc.want)
			}
		})
	}
}

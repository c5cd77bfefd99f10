package dispatch_test

import (
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
)

type nopObserver struct{}

func (nopObserver) Rejected(dispatch.Target, dispatch.Reason) {}
func (nopObserver) Parked(dispatch.Target, int)               {}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkPark parks 100 000 requests in one scheduler (its only backend is full, every
// request may wait 60 s) and reports the heap the scheduler holds per parked request
// (B/parked, budget ≤ 200) and the total including each request's own Pending and mailbox
// (B/request). Run: go test -run '^$' -bench Park -benchtime 1x ./gateway/dispatch/
func BenchmarkPark(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		sys := actors.NewSystem(slog.New(slog.DiscardHandler))
		dir := dispatch.NewDirectory(sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: nopObserver{}})
		pid := dir.Ensure(target)
		sys.Root.Send(pid, &dispatch.BackendChanged{View: dispatch.BackendView{
			ID: "full", ClusterID: "full", Active: true, HasRTT: true, Seq: &atomic.Uint64{}, UpdatedAt: time.Now(),
			Load: load.Load{InputTPS: 1000, RunningRequests: 1, MaxEngineConcurrency: 1},
		}})
		base := heapAlloc()
		ps := make([]*dispatch.Pending, n)
		for i := range ps {
			p := dispatch.NewPending(time.Now())
			e := waw()
			p.Entry = &e
			p.Req.InputTokens = 100
			p.MaxWait, p.HasMaxWait = time.Minute, true
			ps[i] = p
		}
		before := heapAlloc()
		for _, p := range ps {
			sys.Root.Send(pid, dispatch.Route{P: p})
		}
		for {
			if st := dir.States(); len(st) == 1 && st[0].Parked == n {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		after := heapAlloc()
		b.ReportMetric(float64(after-before)/n, "B/parked")
		b.ReportMetric(float64(after-base)/n, "B/request")
		runtime.KeepAlive(ps)
		dir.Stop()
	}
}

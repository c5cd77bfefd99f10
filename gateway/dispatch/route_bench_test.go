package dispatch_test

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// BenchmarkReportThenRoute is the scheduler's share of one proxied request: a load report
// from the backend that served the previous request (a BackendChanged, as every pylon
// response brings) and then a Route decided inline, with 1, 8 and 64 single-backend
// clusters. Run: go test -run '^$' -bench ReportThenRoute -benchmem ./gateway/dispatch/
func BenchmarkReportThenRoute(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			sys := actors.NewSystem(slog.New(slog.DiscardHandler))
			dir := dispatch.NewDirectory(sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: nopObserver{}})
			defer dir.Stop()
			pid := dir.Ensure(target)
			views := make([]dispatch.BackendView, n)
			for i := range views {
				id := fmt.Sprintf("b%02d", i)
				views[i] = dispatch.BackendView{
					ID: id, URL: "http://" + id, ClusterID: id, Active: true, HasRTT: true, RTT: time.Millisecond,
					Seq: &atomic.Uint64{}, UpdatedAt: time.Now(),
					Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 8, RunningRequests: uint64(i % 3)},
				}
				sys.Root.Send(pid, dispatch.NewBackendChanged(&views[i]))
			}
			e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
			var pp dispatch.PendingPool
			last := 0
			b.ReportAllocs()
			for b.Loop() {
				v := &views[last]
				v.SeqEcho = v.Seq.Load()
				v.UpdatedAt = time.Now()
				sys.Root.Send(pid, dispatch.NewBackendChanged(v))
				p := pp.Acquire(time.Now())
				p.Entry = &e
				p.Req.InputTokens = 100
				sys.Root.Send(pid, dispatch.Route{P: p})
				out := <-p.Mailbox
				if out.Kind != dispatch.OutcomeGranted {
					b.Fatalf("outcome %+v", out)
				}
				for i := range views {
					if views[i].ID == out.BackendID {
						last = i
					}
				}
				pp.Release(p)
			}
		})
	}
}

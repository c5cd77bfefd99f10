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

// BenchmarkReportThenRouteLargeFleet is BenchmarkReportThenRoute on large fleets, for
// power-of-n and wait-and-widen (whose global phase reads the TTFT index there): the
// scheduler's whole share of a request — the report patched in, the corrections read, the
// index updated, the decision, the reservation — with every answer's time to first byte
// fed back to the TTFT correction.
func BenchmarkReportThenRouteLargeFleet(b *testing.B) {
	for _, alg := range []lbconfig.Algorithm{lbconfig.PowerOfN, lbconfig.WaitAndWiden} {
		for _, n := range []int{64, 512, 4096} {
			b.Run(fmt.Sprintf("%s/backends=%d", alg, n), func(b *testing.B) {
				sys := actors.NewSystem(slog.New(slog.DiscardHandler))
				dir := dispatch.NewDirectory(sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: nopObserver{}})
				defer dir.Stop()
				pid := dir.Ensure(target)
				views := make([]dispatch.BackendView, n)
				byID := make(map[string]int, n)
				for i := range views {
					id := fmt.Sprintf("b%04d", i)
					byID[id] = i
					views[i] = dispatch.BackendView{
						ID: id, URL: "http://" + id, ClusterID: id, Active: true, HasRTT: true, RTT: time.Millisecond + time.Duration(i%7)*100*time.Microsecond,
						Seq: &atomic.Uint64{}, UpdatedAt: time.Now(),
						Load: load.Load{InputTPS: 1000 + float64(i%13)*31, MaxEngineConcurrency: 8, RunningRequests: uint64(i % 3)},
					}
					sys.Root.Send(pid, dispatch.NewBackendChanged(&views[i]))
				}
				e := lbconfig.DefaultEntry(alg)
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
					last = byID[out.BackendID]
					// The answer's time to first byte, 0–18 % over the estimate by cluster:
					// the clusters' corrections keep learning, as under traffic.
					out.Feedback.Observe(time.Duration(float64(out.Estimate) * (1 + float64(last%10)/50)))
					pp.Release(p)
				}
			})
		}
	}
}

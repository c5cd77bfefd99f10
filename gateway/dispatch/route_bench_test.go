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
			views := make([]dispatch.BackendView, n)
			for i := range views {
				id := fmt.Sprintf("b%02d", i)
				views[i] = dispatch.BackendView{
					ID: id, URL: "http://" + id, ClusterID: id, Active: true, HasRTT: true, RTT: time.Millisecond,
					Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 8, RunningRequests: uint64(i % 3)},
				}
			}
			reportThenRoute(b, views, lbconfig.DefaultEntry(lbconfig.PowerOfN), false)
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
				views := make([]dispatch.BackendView, n)
				for i := range views {
					id := fmt.Sprintf("b%04d", i)
					views[i] = dispatch.BackendView{
						ID: id, URL: "http://" + id, ClusterID: id, Active: true, HasRTT: true, RTT: time.Millisecond + time.Duration(i%7)*100*time.Microsecond,
						Load: load.Load{InputTPS: 1000 + float64(i%13)*31, MaxEngineConcurrency: 8, RunningRequests: uint64(i % 3)},
					}
				}
				reportThenRoute(b, views, lbconfig.DefaultEntry(alg), true)
			})
		}
	}
}

// reportThenRoute registers views with a new scheduler, then times the loop: the report of
// the backend that served the previous request, and a Route for e. With observe, each
// answer's time to first byte, 0–18 % over the estimate by backend, is fed back to the
// TTFT correction: the clusters' corrections keep learning, as under traffic.
func reportThenRoute(b *testing.B, views []dispatch.BackendView, e lbconfig.Entry, observe bool) {
	b.Helper()
	sys := actors.NewSystem(slog.New(slog.DiscardHandler))
	dir := dispatch.NewDirectory(sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: nopObserver{}})
	defer dir.Stop()
	pid := dir.Ensure(target)
	byID := make(map[string]int, len(views))
	for i := range views {
		byID[views[i].ID] = i
		views[i].Seq, views[i].UpdatedAt = &atomic.Uint64{}, time.Now()
		sys.Root.Send(pid, dispatch.NewBackendChanged(&views[i]))
	}
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
		if observe {
			out.Feedback.Observe(time.Duration(float64(out.Estimate) * (1 + float64(last%10)/50)))
		}
		pp.Release(p)
	}
}

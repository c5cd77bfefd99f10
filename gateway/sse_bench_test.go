package gateway_test

import (
	"bufio"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/wire"
)

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSSEForwarding measures the CPU each SSE event costs on its way through a bare
// streaming fasthttp proxy (fasthttp's zero-copy idiom) and through the gateway, side by
// side: streams of 100 events (one flush each, in lockstep with the client, so each event
// is its own read and write on every hop, as tokens are) are read from the upstream
// directly, through the proxy and through the gateway, rotating the three paths, and the
// process CPU per event of each path minus the direct one is that path's cost (budget:
// gateway ≤ 1.2× proxy). Run: go test -run '^$' -bench SSEForwarding -benchtime 1x ./gateway/
func BenchmarkSSEForwarding(b *testing.B) {
	const events, streams = 100, 300
	event := []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n")
	ack := make(chan struct{}, 1)
	upstream := serve(b, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == wire.HealthPath {
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.Response.Header.Set(wire.HeaderPylonLoad, "v=1;m="+benchModel+";tps=1000;mc=8")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for range events {
				_, _ = w.Write(event)
				_ = w.Flush()
				select { // lockstep: the next event once the client has this one
				case <-ack:
				case <-time.After(5 * time.Second):
					return
				}
			}
		})
	})
	proxy, gw := benchFleet(b, upstream, true)

	paths := []string{upstream, proxy, gw}
	clients := make([]*fasthttp.HostClient, len(paths))
	for i, a := range paths {
		clients[i] = &fasthttp.HostClient{Addr: a}
	}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/chat/completions")
	req.Header.Set(wire.HeaderModel, benchModel)
	req.Header.Set(wire.HeaderInputTokens, "3")
	req.Header.Set(wire.HeaderRequestID, benchRequestID)
	req.SetBodyString(`{"model":"` + benchModel + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	buf := make([]byte, 64<<10)
	var cpu [3]time.Duration
	for b.Loop() {
		cpu = [3]time.Duration{}
		for k := range streams {
			for j := range clients {
				i := (k + j) % len(clients)
				req.SetHost(paths[i])
				resp.StreamBody = true
				start := cpuTime(b)
				if err := clients[i].Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("path %d: %v %d", i, err, resp.StatusCode())
				}
				n, acked := 0, 0
				for s := resp.BodyStream(); ; {
					m, err := s.Read(buf)
					n += m
					for ; acked < n/len(event); acked++ {
						ack <- struct{}{}
					}
					if err != nil {
						break
					}
				}
				_ = resp.CloseBodyStream()
				cpu[i] += cpuTime(b) - start
				if n != events*len(event) {
					b.Fatalf("path %d: read %d bytes, want %d", i, n, events*len(event))
				}
			}
		}
	}
	per := func(i int) float64 { return float64(cpu[i]-cpu[0]) / float64(streams*events) / 1e3 }
	b.ReportMetric(float64(cpu[0])/float64(streams*events)/1e3, "direct-µs-cpu/event")
	b.ReportMetric(per(1), "proxy-added-µs-cpu/event")
	b.ReportMetric(per(2), "gateway-added-µs-cpu/event")
	b.ReportMetric(per(2)/per(1), "ratio")
}

package gateway_test

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// The benchmarks' model and request id: realistic lengths (one-byte strings never
// allocate, which would hide a copy of the header).
const (
	benchModel     = "dummy-model"
	benchRequestID = "chatcmpl-req-0123456789abcdef"
)

// serve runs h on a fresh loopback listener until the benchmark ends.
func serve(tb testing.TB, h fasthttp.RequestHandler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	tb.Cleanup(func() {
		_ = s.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// serialLatencies sends, on each b.Loop iteration, warmup then requests serial
// non-streamed chat requests to every address of paths over keep-alive connections, and
// returns each path's latencies from the last iteration without the warmup ones. Every
// round sends one request on each path, in a rotating order, so drift and bursts of load
// on the noisy VM hit all paths alike.
func serialLatencies(b *testing.B, paths []string, requests, warmup int) [][]time.Duration {
	b.Helper()
	clients := make([]*fasthttp.HostClient, len(paths))
	lat := make([][]time.Duration, len(paths))
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
	req.SetBodyString(`{"model":"` + benchModel + `","messages":[{"role":"user","content":"hi"}]}`)
	for b.Loop() {
		for i := range lat {
			lat[i] = lat[i][:0]
		}
		for k := range requests + warmup {
			for j := range clients {
				i := (k + j) % len(clients)
				req.SetHost(paths[i])
				start := time.Now()
				if err := clients[i].Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("path %d: %v %d %s", i, err, resp.StatusCode(), resp.Body())
				}
				if k >= warmup {
					lat[i] = append(lat[i], time.Since(start))
				}
			}
		}
	}
	return lat
}

func percentile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// BenchmarkAddedLatency measures, side by side in one run, serial non-streaming latency of
// client → upstream directly, through a bare fasthttp reverse proxy (fasthttp's zero-copy
// proxy idiom) and through the gateway, and reports each path's added latency at p50 and
// p99 and the gateway/proxy ratio. The upstream plays a pylon: a 280-byte JSON answer with
// an x-pylon-load report. Everything shares one Go runtime here, a harsher setup than
// deployment: the budget (≤ 1.25×) is measured with every component in its own process by
// `bin/bench overhead` (docs/bench.md), where the gateway's raw socket I/O also keeps its
// runtime's sysmon asleep; this benchmark is the quick in-process diagnostic. Run:
// go test -run '^$' -bench AddedLatency -benchtime 1x ./gateway/
func BenchmarkAddedLatency(b *testing.B) {
	const requests, warmup = 20_000, 2000 // per path
	upstream := serve(b, pylonLike())
	proxy, gw := benchFleet(b, upstream, false)
	ctl := &fasthttp.HostClient{Addr: gw}
	defer ctl.CloseIdleConnections()
	lat := serialLatencies(b, []string{upstream, proxy, gw}, requests, warmup)
	if testing.Verbose() {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + gw + "/metrics")
		if err := ctl.Do(req, resp); err == nil {
			for _, line := range strings.Split(string(resp.Body()), "\n") {
				if strings.Contains(line, "_sum") || strings.Contains(line, "_count") || (strings.Contains(line, "overhead_seconds_bucket") && strings.Contains(line, "e-0")) {
					b.Log(line)
				}
			}
		}
	}
	direct50, direct99 := percentile(lat[0], 0.5), percentile(lat[0], 0.99)
	add := func(i int) (time.Duration, time.Duration) {
		return percentile(lat[i], 0.5) - direct50, percentile(lat[i], 0.99) - direct99
	}
	p50, p99 := add(1)
	g50, g99 := add(2)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	if testing.Verbose() {
		for _, q := range []float64{0.5, 0.9, 0.95, 0.99, 0.999} {
			b.Logf("q%.3f direct %v proxy %v gateway %v", q, percentile(lat[0], q), percentile(lat[1], q), percentile(lat[2], q))
		}
	}
	b.ReportMetric(us(direct50), "direct-p50-µs")
	b.ReportMetric(us(p50), "proxy-added-p50-µs")
	b.ReportMetric(us(p99), "proxy-added-p99-µs")
	b.ReportMetric(us(g50), "gateway-added-p50-µs")
	b.ReportMetric(us(g99), "gateway-added-p99-µs")
	b.ReportMetric(float64(g50)/float64(p50), "ratio-p50")
	b.ReportMetric(float64(g99)/float64(p99), "ratio-p99")
}

// pylonLike is an upstream that plays a pylon: a 280-byte JSON answer with an x-pylon-load
// report echoing the highest dispatch sequence seen, without allocating. Requests must be
// serial (the echo and the report buffer have no lock).
func pylonLike() fasthttp.RequestHandler {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog and keeps running far away."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":16,"total_tokens":19}}`)
	var echo uint64
	var buf []byte
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == wire.HealthPath {
			return
		}
		if v := ctx.Request.Header.Peek(wire.HeaderDispatchSeq); len(v) > 0 {
			if _, seq, err := wire.ParseDispatchSeq(unsafe.String(&v[0], len(v))); err == nil {
				echo = max(echo, seq)
			}
		}
		report := wire.LoadReport{Model: benchModel, Load: idleLoad(), DispatchSeq: echo}
		buf = wire.AppendLoadReport(buf[:0], &report)
		ctx.Response.Header.SetBytesV(wire.HeaderPylonLoad, buf)
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}
}

// benchFleet starts, next to upstream, a bare fasthttp reverse proxy in front of it (one
// HostClient.Do per request; streamBody makes it stream answers, fasthttp's zero-copy
// idiom) and a gateway with upstream registered as backend "u" serving model benchModel; it
// returns both addresses once the backend is routable. Everything stops at cleanup.
func benchFleet(tb testing.TB, upstream string, streamBody bool) (proxy, gw string) {
	tb.Helper()
	upClient := &fasthttp.HostClient{Addr: upstream}
	tb.Cleanup(upClient.CloseIdleConnections)
	proxy = serve(tb, func(ctx *fasthttp.RequestCtx) {
		ctx.Request.Header.Del("Connection")
		ctx.Response.StreamBody = streamBody
		if err := upClient.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	})
	return proxy, benchGateway(tb, gateway.Config{GatewayID: "bench"}, "http://"+upstream)
}

// benchGateway starts a gateway with cfg on loopback (public and admin listeners), registers
// upstreamURL as backend "u" and returns the public address once it is routable.
func benchGateway(tb testing.TB, cfg gateway.Config, upstreamURL string) string {
	tb.Helper()
	g, err := gateway.New(cfg, gateway.Deps{Now: time.Now})
	if err != nil {
		tb.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gdone := make(chan struct{}, 2)
	go func() { _ = g.Serve(gln); gdone <- struct{}{} }()
	go func() { _ = g.ServeAdmin(aln); gdone <- struct{}{} }()
	tb.Cleanup(func() {
		g.Shutdown()
		<-gdone
		<-gdone
	})
	register(tb, aln.Addr().String(), upstreamURL)
	return gln.Addr().String()
}

// register registers upstreamURL as backend "u" serving model benchModel on the gateway's
// admin listener, with the stats capabilities and sources a real pylon lists, and waits
// until the gateway has its first RTT probe (routable).
func register(tb testing.TB, admin, upstreamURL string) {
	tb.Helper()
	ctl := &fasthttp.HostClient{Addr: admin}
	defer ctl.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("PUT")
	req.SetRequestURI("http://" + admin + wire.RegistrationPath + "u")
	req.SetBodyString(`{"inference_server_id":"u","inference_server_url":"` + upstreamURL + `","heartbeat_ms":60000,"models":{"` + benchModel + `":{"status":"ACTIVE","stats":{"last_mean_input_tps":1000,` +
		`"stats_capabilities":["machine.kv_cache.http","request.output.chunk_usage"],"stats_sources":["chunk_usage","kv_cache_stats"]}}}}`)
	if err := ctl.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		tb.Fatalf("register: %v %d %s", err, resp.StatusCode(), resp.Body())
	}
	for range 200 {
		req.Reset()
		req.SetRequestURI("http://" + admin + "/debug/state")
		if err := ctl.Do(req, resp); err == nil && strings.Contains(string(resp.Body()), `"routable": true`) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("backend never routable:\n%s", resp.Body())
}

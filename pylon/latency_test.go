package pylon_test

import (
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/pylon"
)

// TestLoopbackAddedLatency compares the pylon's added latency with a bare fasthttp reverse
// proxy, side by side, over the real engine (serial, non-streaming). It only runs with
// SWITCHYARD_PYLON_LATENCY=N (requests per path), e.g.
//
//	SWITCHYARD_PYLON_LATENCY=5000 go test -run AddedLatency -count=1 -v ./pylon/
func TestLoopbackAddedLatency(t *testing.T) {
	n := 0
	if v := os.Getenv("SWITCHYARD_PYLON_LATENCY"); v != "" {
		for _, c := range v {
			n = n*10 + int(c-'0')
		}
	}
	if n == 0 {
		t.Skip("set SWITCHYARD_PYLON_LATENCY=<requests> to measure")
	}
	engineURL := startEngine(t, "--token-delay-ms", "0", "--num-tokens", "1")
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.ModelNames, cfg.EngineStatsStream = engineURL, []string{"dummy-model"}, "off"
	cfg.InitialInputTPS = 1000
	pylonURL := startPylon(t, cfg)

	// The bare proxy: fasthttp's zero-copy streaming proxy idiom (hop-by-hop headers removed,
	// HostClient.Do into the response), nothing else.
	hc := &fasthttp.HostClient{Addr: engineURL[len("http://"):]}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error(err.Error(), 502)
		}
	}}
	go func() { _ = bare.Serve(ln) }()
	t.Cleanup(func() { _ = bare.Shutdown(); hc.CloseIdleConnections() })
	bareURL := "http://" + ln.Addr().String()

	// One keep-alive client per path; every iteration sends one request on each path, in
	// a rotating order, so drift and bursts of load on the noisy VM hit all paths alike.
	urls := []string{engineURL, bareURL, pylonURL}
	clients := make([]*fasthttp.HostClient, len(urls))
	for i, u := range urls {
		clients[i] = &fasthttp.HostClient{Addr: u[len("http://"):]}
	}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	samples := [3][]time.Duration{make([]time.Duration, 0, n), make([]time.Duration, 0, n), make([]time.Duration, 0, n)}
	req := chatRequest(pylonURL, "lat", 20, nil)
	req.SetBodyString(`{"model":"dummy-model","messages":[{"role":"user","content":"hi"}]}`)
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	warmup := n / 10
	for i := range n + warmup {
		for k := range urls {
			path := (i + k) % len(urls)
			req.SetRequestURI(urls[path] + "/v1/chat/completions")
			start := time.Now()
			err := clients[path].Do(req, resp)
			d := time.Since(start)
			if err != nil || resp.StatusCode() != 200 {
				t.Fatalf("%s: %v %d", urls[path], err, resp.StatusCode())
			}
			if i >= warmup {
				samples[path] = append(samples[path], d)
			}
		}
	}
	q := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	for _, s := range samples {
		slices.Sort(s)
	}
	direct, viaBare, viaPylon := samples[0], samples[1], samples[2]
	for _, p := range []float64{0.5, 0.99} {
		bareAdded := q(viaBare, p) - q(direct, p)
		pylonAdded := q(viaPylon, p) - q(direct, p)
		t.Logf("p%.0f: direct %v, bare proxy %v (+%v), pylon %v (+%v), ratio %.2f",
			p*100, q(direct, p), q(viaBare, p), bareAdded, q(viaPylon, p), pylonAdded, float64(pylonAdded)/float64(bareAdded))
	}
}

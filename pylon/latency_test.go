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

	// The bare proxy: the LIBRARIES.md §2.4 idiom, nothing else.
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

	run := func(url string) []time.Duration {
		c := &fasthttp.HostClient{Addr: url[len("http://"):]}
		defer c.CloseIdleConnections()
		out := make([]time.Duration, 0, n)
		for i := range n + n/10 {
			req := chatRequest(url, "lat", 20, nil)
			req.SetBodyString(`{"model":"dummy-model","messages":[{"role":"user","content":"hi"}]}`)
			resp := fasthttp.AcquireResponse()
			start := time.Now()
			err := c.Do(req, resp)
			d := time.Since(start)
			if err != nil || resp.StatusCode() != 200 {
				t.Fatalf("%s: %v %d", url, err, resp.StatusCode())
			}
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(resp)
			if i >= n/10 { // warm-up excluded
				out = append(out, d)
			}
		}
		slices.Sort(out)
		return out
	}
	q := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	direct, viaBare, viaPylon := make([]time.Duration, 0, 3*n), make([]time.Duration, 0, 3*n), make([]time.Duration, 0, 3*n)
	// Interleave rounds so drift on the noisy VM hits every path alike.
	for range 3 {
		direct = append(direct, run(engineURL)...)
		viaBare = append(viaBare, run(bareURL)...)
		viaPylon = append(viaPylon, run(pylonURL)...)
	}
	for _, s := range [][]time.Duration{direct, viaBare, viaPylon} {
		slices.Sort(s)
	}
	for _, p := range []float64{0.5, 0.99} {
		bareAdded := q(viaBare, p) - q(direct, p)
		pylonAdded := q(viaPylon, p) - q(direct, p)
		t.Logf("p%.0f: direct %v, bare proxy %v (+%v), pylon %v (+%v), ratio %.2f",
			p*100, q(direct, p), q(viaBare, p), bareAdded, q(viaPylon, p), pylonAdded, float64(pylonAdded)/float64(bareAdded))
	}
}

package pylon_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/pylon"
)

// fakeStatsEngine serves only the NDJSON stats stream; every string sent on lines becomes
// one line of the stream.
func fakeStatsEngine(t *testing.T) (url string, lines chan<- string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string)
	stop := make(chan struct{})
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != "/pylon/v1/stats/stream" {
			ctx.SetStatusCode(404)
			return
		}
		ctx.SetContentType("application/x-ndjson")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for {
				select {
				case l := <-ch:
					_, _ = w.WriteString(l + "\n")
					if w.Flush() != nil {
						return
					}
				case <-stop:
					return
				}
			}
		})
	}}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() {
		close(stop)
		_ = srv.Shutdown()
		<-done
	})
	return "http://" + ln.Addr().String(), ch
}

func TestLoopbackPingOverridesConcurrencyFallback(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("loopback test: skipped with -short")
	}
	engineURL, lines := fakeStatsEngine(t)
	cs := startControl(t)
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.ModelNames, cfg.Gateways = engineURL, []string{"llama"}, []string{cs.url}
	cfg.MaxEngineConcurrency = 8
	cfg.EngineStatsStream = "required"
	startPylon(t, cfg)
	maxConc := func(want uint64) func(received) bool {
		return func(r received) bool { s, ok := modelStats(r, "llama"); return ok && s.MaxEngineConcurrency == want }
	}
	cs.await(t, 10*time.Second, maxConc(8)) // the fallback is published from the first registration
	for _, step := range []struct {
		line string
		want uint64
	}{
		{`{"v":1,"type":"ping","model":"llama","max_engine_concurrency":25}`, 25},
		// Another model: ignored.
		{`{"v":1,"type":"ping","model":"other","max_engine_concurrency":3}`, 25},
		// No field: unchanged.
		{`{"v":1,"type":"ping"}`, 25},
		// Withdrawn: the fallback is restored.
		{`{"v":1,"type":"ping","model":"llama","max_engine_concurrency":0}`, 8},
	} {
		select {
		case lines <- step.line:
		case <-time.After(10 * time.Second):
			t.Fatal("the pylon never connected to the stats stream")
		}
		if step.want != 25 || step.line[len(step.line)-3:] == "25}" {
			cs.await(t, 10*time.Second, maxConc(step.want))
		}
	}
}

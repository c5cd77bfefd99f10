package overhead

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func TestMain(m *testing.M) { mocktest.Main(m) }

// serve runs h on a loopback listener until the test ends.
func serve(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = s.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// Measure sends the same request on every path, rotating, and keeps warmup out of the
// samples; the bare proxy forwards headers and body and answers with the upstream's
// status; a failing path is an error naming it.
func TestMeasureRotatesOverEveryPath(t *testing.T) {
	var calls [NumPaths]int
	upstream := func(path int) string {
		return serve(t, func(ctx *fasthttp.RequestCtx) {
			calls[path]++
			if string(ctx.Request.Header.Peek("x-model")) != "m" || len(ctx.PostBody()) == 0 {
				ctx.SetStatusCode(fasthttp.StatusBadRequest)
				return
			}
			ctx.SetBodyString(`{"ok":true}`)
		})
	}
	var targets Targets
	for p := range targets {
		targets[p] = upstream(p)
	}
	proxied := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetBodyString(`{"ok":true}`)
		if string(ctx.Request.Header.Peek("x-input-tokens")) != "8" {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
		}
	})
	h, closeIdle := BareProxy(proxied)
	defer closeIdle()
	targets[ProxyEngine] = serve(t, h)
	res, err := Measure(context.Background(), targets, "m", 50, 5)
	if err != nil {
		t.Fatal(err)
	}
	for p := range NumPaths {
		if n := len(res.Samples[p]); n != 50 {
			t.Errorf("%s: %d samples, want 50", PathNames[p], n)
		}
		if p != ProxyEngine && calls[p] != 55 {
			t.Errorf("%s: %d calls, want 55", PathNames[p], calls[p])
		}
	}
	if res.Quantile(Engine, 0.5) <= 0 || res.Quantile(Engine, 0.99) < res.Quantile(Engine, 0.5) {
		t.Errorf("quantiles out of order: %v %v", res.Quantile(Engine, 0.5), res.Quantile(Engine, 0.99))
	}

	targets[GatewayPylon] = serve(t, func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusServiceUnavailable) })
	if _, err := Measure(context.Background(), targets, "m", 5, 0); err == nil {
		t.Error("a path answering 503 was not reported")
	}
}

// Added and Ratio subtract the baseline at the same quantile.
func TestAddedAndRatio(t *testing.T) {
	us := time.Microsecond
	var r Result
	r.Samples[Engine] = []time.Duration{10 * us, 10 * us, 20 * us}
	r.Samples[ProxyEngine] = []time.Duration{30 * us, 30 * us, 60 * us}
	r.Samples[PylonEngine] = []time.Duration{35 * us, 35 * us, 80 * us}
	if got := r.Added(PylonEngine, Engine, 0.5); got != 25*us {
		t.Errorf("added p50 %v, want 25µs", got)
	}
	if got := r.Ratio(PylonEngine, ProxyEngine, Engine, 0.5); got != 1.25 {
		t.Errorf("ratio p50 %v, want 1.25", got)
	}
	if got := r.Ratio(PylonEngine, ProxyEngine, Engine, 1); got != 1.5 {
		t.Errorf("ratio p100 %v, want 1.5", got)
	}
}

// Throughput counts successful requests over the whole run and reports a failing target.
func TestThroughput(t *testing.T) {
	ok := serve(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Request.Header.Peek("x-model")) != "m" {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
			return
		}
		ctx.SetBodyString(`{"ok":true}`)
	})
	rps, err := Throughput(context.Background(), ok, "m", 4, 200*time.Millisecond)
	if err != nil || rps <= 0 {
		t.Fatalf("rps %v, err %v", rps, err)
	}
	busy := serve(t, func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusServiceUnavailable) })
	if _, err := Throughput(context.Background(), busy, "m", 4, 200*time.Millisecond); err == nil {
		t.Error("a target answering 503 was not reported")
	}
}

package pylon

import (
	"net"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/internal/wire"
)

// benchUpstream serves a fixed chat completion over an in-memory listener.
func benchUpstream(b *testing.B) *fasthttputil.InmemoryListener {
	b.Helper()
	ln := fasthttputil.NewInmemoryListener()
	body := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":1,"total_tokens":21}}`)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return ln
}

func benchRequest(ctx *fasthttp.RequestCtx) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.SetRequestURI("http://pylon/v1/chat/completions")
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.Header.Set(wire.HeaderRequestID, "bench")
	ctx.Request.Header.Set(wire.HeaderModel, "m")
	ctx.Request.Header.Set(wire.HeaderInputTokens, "20")
	ctx.Request.SetBodyString(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
}

// BenchmarkServeBuffered measures the data-path handler for a non-streamed request over an
// in-memory engine, next to a bare proxy handler doing only the upstream call: the
// difference is the pylon's own work (admission, bookkeeping, x-pylon-load, metrics).
// path=pylon-from-gateway adds what a gateway sends (a dispatch sequence and the expected
// queue delay, so the sequence echo and queue admission run too).
func BenchmarkServeBuffered(b *testing.B) {
	ln := benchUpstream(b)
	dial := func(string) (net.Conn, error) { return ln.Dial() }
	b.Run("path=bare", func(b *testing.B) {
		hc := &fasthttp.HostClient{Addr: "engine", Dial: dial}
		defer hc.CloseIdleConnections()
		var ctx fasthttp.RequestCtx
		b.ReportAllocs()
		for b.Loop() {
			benchRequest(&ctx)
			if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tagged := range []bool{false, true} {
		name := "path=pylon"
		if tagged {
			name = "path=pylon-from-gateway"
		}
		b.Run(name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.UpstreamBaseURL, cfg.InitialInputTPS = "http://engine", 1000
			p, err := New(cfg, Deps{Dial: dial})
			if err != nil {
				b.Fatal(err)
			}
			defer p.sys.Shutdown()
			defer p.client.CloseIdleConnections()
			p.setModels([]string{"m"})
			var ctx fasthttp.RequestCtx
			var seq uint64
			var seqBuf [32]byte
			b.ReportAllocs()
			for b.Loop() {
				benchRequest(&ctx)
				if tagged {
					seq++
					ctx.Request.Header.SetBytesV(wire.HeaderDispatchSeq, strconv.AppendUint(append(seqBuf[:0], "gw/"...), seq, 10))
					ctx.Request.Header.Set(wire.HeaderExpectedQueueMs, "0")
				}
				p.serve(&ctx)
				if ctx.Response.StatusCode() != 200 || len(ctx.Response.Header.Peek(wire.HeaderPylonLoad)) == 0 {
					b.Fatalf("status %d\n%s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
			if r, err := wire.ParseLoadReport(string(ctx.Response.Header.Peek(wire.HeaderPylonLoad))); err != nil || r.DispatchSeq != seq {
				b.Fatalf("the last answer's load report echoes seq %d (%v), want %d", r.DispatchSeq, err, seq)
			}
		})
	}
}

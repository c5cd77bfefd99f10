package mock_test

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
)

// startTCP serves an engine on a loopback TCP port (real time).
func startTCP(b *testing.B, cfg mock.Config) (addr string, stop func()) {
	b.Helper()
	eng, err := mock.New(cfg, mock.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(b.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- eng.Serve(ln) }()
	return ln.Addr().String(), func() {
		_ = eng.Close()
		<-served
	}
}

var zeroDelays = mock.Config{ModelNames: []string{"m"}, NumTokens: 16}

// BenchmarkNonStreaming measures non-streaming chat completions per second with every delay zero.
func BenchmarkNonStreaming(b *testing.B) {
	addr, stop := startTCP(b, zeroDelays)
	defer stop()
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: 256}
	defer hc.CloseIdleConnections()
	body := chatBody(false, "hello benchmark")
	b.ReportAllocs()
	b.SetParallelism(16)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + addr + "/v1/chat/completions")
		req.Header.SetMethod("POST")
		req.SetBodyString(body)
		for pb.Next() {
			if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("request: %v %d", err, resp.StatusCode())
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

// BenchmarkStreamedTokens measures streamed tokens per second (one SSE chunk per token)
// with every delay zero; each op is one stream of 100 tokens.
func BenchmarkStreamedTokens(b *testing.B) {
	cfg := zeroDelays
	cfg.NumTokens = 100
	addr, stop := startTCP(b, cfg)
	defer stop()
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: 256}
	defer hc.CloseIdleConnections()
	body := chatBody(true, "hello benchmark")
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + addr + "/v1/chat/completions")
		req.Header.SetMethod("POST")
		req.SetBodyString(body)
		for pb.Next() {
			resp.StreamBody = true
			if err := hc.Do(req, resp); err != nil {
				b.Errorf("request: %v", err)
				return
			}
			n, err := io.Copy(io.Discard, resp.BodyStream())
			if err != nil || n < 100*100 {
				b.Errorf("stream: %d bytes, %v", n, err)
			}
			_ = resp.CloseBodyStream()
		}
	})
	b.ReportMetric(float64(b.N*100)/time.Since(start).Seconds(), "tokens/s")
}

// BenchmarkOpenStreamMemory measures the engine's memory per open stream: 500 raw
// connections each hold a chat stream that waits an hour for its second token, and the
// growth of HeapInuse + StackInuse is divided by 500. Both snapshots follow two GCs, so
// buffers that went back to sync.Pools (read buffers, request bodies) are not counted.
// The client's sockets are in the same process and are counted too (~0.3 KB).
//
//	go test -run '^$' -bench BenchmarkOpenStreamMemory -benchtime 3x -count 5 ./engines/mock/
//
// Measured on the 2-vCPU dev VM (issue 3 asks ≤ 16 KiB = 16 384 B):
//
//	                    before        after
//	prompt_bytes=1      25.9–26.5 KB  13.7–14.3 KB/stream (heap 5.5–6.0 KB, stack 8.2 KB)
//	prompt_bytes=16384  79–87 KB      13.7–13.8 KB/stream (body, prompt copy and hashes dropped)
//
// The 8 KiB is the stack of the fasthttp goroutine serving the connection; the runtime
// cannot shrink it to 4 KiB (fasthttp's serveConnCounted frame alone is 856 B). The heap
// is the RequestCtx ~1.75 KB, the 1 KiB write buffer, the response headers ~0.7 KB, the
// stream's gen, request and timer ~1 KB, and sockets ~0.6 KB. "Before" is the engine
// without ReduceMemoryUsage (the 4 KiB read buffer is now pooled while a stream is open),
// with a 4 KiB write buffer, the 4 KiB copy buffer fasthttp holds while Read blocks (now
// WriteTo) and the request body, prompt copy and prefix hashes kept for the stream's life.
func BenchmarkOpenStreamMemory(b *testing.B) {
	for _, promptBytes := range []int{1, 16 << 10} {
		b.Run("prompt_bytes="+itoa(promptBytes), func(b *testing.B) {
			benchmarkOpenStreamMemory(b, strings.Repeat("x", promptBytes))
		})
	}
}

func benchmarkOpenStreamMemory(b *testing.B, prompt string) {
	b.Helper()
	cfg := zeroDelays
	cfg.TokenDelay = time.Hour
	addr, stop := startTCP(b, cfg)
	defer stop()
	const streams = 500
	body := chatBody(true, prompt)
	request := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: e\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(len(body)) + "\r\n\r\n" + body)
	gc := func(m *runtime.MemStats) {
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(m)
	}
	for b.Loop() {
		var before, after runtime.MemStats
		gc(&before)
		conns := make([]net.Conn, 0, streams)
		d := net.Dialer{}
		for range streams {
			c, err := d.DialContext(b.Context(), "tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Write(request); err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		// Wait until every stream has sent its first token.
		for _, c := range conns {
			br := bufio.NewReaderSize(c, 512)
			seen := 0
			for seen < 2 {
				line, err := br.ReadString('\n')
				if err != nil {
					b.Fatalf("reading stream: %v", err)
				}
				if strings.HasPrefix(line, "data: ") {
					seen++
				}
			}
		}
		gc(&after)
		heap := float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / streams
		stack := float64(int64(after.StackInuse)-int64(before.StackInuse)) / streams
		b.ReportMetric(heap+stack, "B/stream")
		b.ReportMetric(heap, "heap-B/stream")
		b.ReportMetric(stack, "stack-B/stream")
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

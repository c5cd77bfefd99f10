package gateway_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/testkit/rawhttp"
	"github.com/switchyard/switchyard/internal/tlsx/tlstest"
	"github.com/switchyard/switchyard/internal/wire"
)

// endlessUpstream serves an event stream that never ends on its own: events are written
// until a write fails (the gateway closed the stream), then ended is closed.
func endlessUpstream(t *testing.T) (url string, ended <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	event := []byte(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + fmt.Sprintf("%0200d", 0) + `"}}]}` + "\n\n")
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsPost() { // the gateway's health checks
			ctx.SetBodyString("{}")
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer close(done)
			for {
				if _, err := w.Write(event); err != nil {
					return
				}
				if err := w.Flush(); err != nil {
					return
				}
			}
		})
	}}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		<-served
	})
	return "http://" + ln.Addr().String(), done
}

// A client that asks for a stream and then reads nothing has its stream ended once a
// write to it has waited --write-timeout without progress: it is counted 499 (client
// gone), the upstream stream is closed, and the connection is closed (the client, reading
// at last, gets what the socket buffers held and then the end of the connection). Over TLS
// too: the bound is armed on the socket beneath.
func TestLoopbackWriteTimeoutEndsAStreamNobodyReads(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[overTLS], func(t *testing.T) {
			cfg := gateway.Config{ServerLimits: httpserver.Limits{WriteTimeout: 300 * time.Millisecond}}
			var ca *tlstest.CA
			if overTLS {
				ca = tlstest.NewCA(t, t.TempDir())
				cert, key := ca.Issue(t, "gateway", "127.0.0.1")
				cfg.TLS = tlsxServer(cert, key, "")
			}
			l := startLoopback(t, cfg)
			dial := func() (net.Conn, error) { return net.Dial("tcp", l.addr) }
			if overTLS {
				conf := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
				for _, c := range []*fasthttp.HostClient{l.client, l.adminC} { // both listeners serve TLS
					c.IsTLS, c.TLSConfig = true, conf
				}
				dial = func() (net.Conn, error) { return tls.Dial("tcp", l.addr, conf) }
			}
			url, ended := endlessUpstream(t)
			l.registerURL("e1", url, "endless-model", wire.Stats{MaxEngineConcurrency: 4})
			conn, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := `{"model":"endless-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			select {
			case <-ended:
			case <-time.After(20 * time.Second):
				t.Fatal("the upstream stream is still being written 20 s after its client stopped reading (write timeout 300 ms)")
			}
			waitMetric(t, l, `switchyard_requests_total{routing_key="",model="endless-model",inference_server_id="e1",status="499"} 1`)
			waitMetric(t, l, "switchyard_streams_relayed 0")
			waitMetric(t, l, "switchyard_inflight_requests 0")
			rawhttp.ExpectClosed(t, conn, "gateway")
		})
	}
}

package gateway_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/internal/tlsx/tlstest"
)

// serveTLS runs h over TLS (cert, key) on a fresh loopback listener until the benchmark
// ends.
func serveTLS(tb testing.TB, h fasthttp.RequestHandler, cert, key string) string {
	tb.Helper()
	cfg, err := tlsx.ServerConfig(tlsx.ServerOptions{CertFile: cert, KeyFile: key}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(tls.NewListener(ln, cfg))
	}()
	tb.Cleanup(func() {
		_ = s.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// BenchmarkTLSHop measures what TLS on the gateway → pylon hop adds to a request's
// latency: two gateways side by side in one run, one reaching its pylon-like upstream over
// plain HTTP, the other over TLS 1.3 (keep-alive connections, so the handshake is paid once
// per pooled connection; the measured cost is record encryption and decryption on both
// ends). Serial non-streamed requests in a rotating order; it reports each path's p50 and
// p99 and the difference. Run:
// go test -run '^$' -bench TLSHop -benchtime 1x ./gateway/
func BenchmarkTLSHop(b *testing.B) {
	const requests, warmup = 20_000, 2000 // per path
	ca := tlstest.NewCA(b, b.TempDir())
	cert, key := ca.Issue(b, "pylon", "127.0.0.1")
	plain := benchGateway(b, gateway.Config{GatewayID: "plain"}, "http://"+serve(b, pylonLike()))
	secure := benchGateway(b, gateway.Config{GatewayID: "tls", UpstreamTLS: tlsx.ClientOptions{CAFile: ca.CertFile()}},
		"https://"+serveTLS(b, pylonLike(), cert, key))
	lat := serialLatencies(b, []string{plain, secure}, requests, warmup)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	p50, p99 := percentile(lat[0], 0.5), percentile(lat[0], 0.99)
	t50, t99 := percentile(lat[1], 0.5), percentile(lat[1], 0.99)
	b.ReportMetric(us(p50), "plain-p50-µs")
	b.ReportMetric(us(p99), "plain-p99-µs")
	b.ReportMetric(us(t50), "tls-p50-µs")
	b.ReportMetric(us(t99), "tls-p99-µs")
	b.ReportMetric(us(t50-p50), "tls-added-p50-µs")
	b.ReportMetric(us(t99-p99), "tls-added-p99-µs")
}

package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/internal/tlsx/tlstest"
	"github.com/switchyard/switchyard/pylon"
)

// tlsFleet is a gateway, one pylon and its engine on real 127.0.0.1 sockets, with TLS on
// every listener, mutual TLS between gateway and pylon both ways and a control token.
type tlsFleet struct {
	ca                 *tlstest.CA
	gwCert, gwKey      string
	public, admin      string // the gateway's addresses
	pylonData, pylonAd string // the pylon's addresses
	client             *fasthttp.HostClient
}

func tlsxServer(cert, key, clientCA string) tlsx.ServerOptions {
	return tlsx.ServerOptions{CertFile: cert, KeyFile: key, ClientCAFile: clientCA}
}

func tlsxClient(ca, cert, key string) tlsx.ClientOptions {
	return tlsx.ClientOptions{CAFile: ca, CertFile: cert, KeyFile: key}
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func startTLSFleet(t *testing.T) *tlsFleet {
	t.Helper()
	if testing.Short() {
		t.Skip("loopback test")
	}
	dir := t.TempDir()
	f := &tlsFleet{ca: tlstest.NewCA(t, dir)}
	f.gwCert, f.gwKey = f.ca.Issue(t, "gateway", "127.0.0.1", "localhost")
	pyCert, pyKey := f.ca.Issue(t, "pylon", "127.0.0.1")
	engCert, engKey := f.ca.Issue(t, "engine", "127.0.0.1")
	const token = "tls-test-token"

	engine := "https://" + strings.TrimPrefix(startEngine(t, mock.Config{NumTokens: 5, TLS: tlsxServer(engCert, engKey, "")}), "http://")

	pub, adm := listenLoopback(t), listenLoopback(t)
	f.public, f.admin = pub.Addr().String(), adm.Addr().String()
	g, err := gateway.New(gateway.Config{
		GatewayID: "gw-tls", ControlToken: token,
		TLS:               tlsxServer(f.gwCert, f.gwKey, ""),
		AdminClientCAFile: f.ca.CertFile(),
		UpstreamTLS:       tlsxClient(f.ca.CertFile(), f.gwCert, f.gwKey),
	}, gateway.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{}, 2)
	go func() { _ = g.Serve(pub); served <- struct{}{} }()
	go func() { _ = g.ServeAdmin(adm); served <- struct{}{} }()

	dl, al := listenLoopback(t), listenLoopback(t)
	f.pylonData, f.pylonAd = dl.Addr().String(), al.Addr().String()
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.ModelNames, cfg.ID = engine, []string{"dummy-model"}, "p-tls"
	cfg.Gateways = []string{"https://" + f.admin}
	cfg.InitialInputTPS, cfg.PinInputTPS, cfg.DrainTimeout = 1000, true, time.Second
	cfg.MinUpdateInterval, cfg.ControlToken, cfg.KVCacheStatsPath = 200*time.Millisecond, token, "/kv-cache/stats"
	cfg.TLS = tlsxServer(pyCert, pyKey, f.ca.CertFile())
	cfg.ClientTLS = tlsxClient(f.ca.CertFile(), pyCert, pyKey)
	p, err := pylon.New(cfg, pylon.Deps{Listener: dl, AdminListener: al, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pylonDone := make(chan error, 1)
	go func() { pylonDone <- p.Run(ctx) }()

	f.client = &fasthttp.HostClient{Addr: f.public, IsTLS: true, TLSConfig: &tls.Config{RootCAs: f.ca.Pool(), MinVersion: tls.VersionTLS12}}
	t.Cleanup(func() {
		f.client.CloseIdleConnections()
		cancel()
		if err := <-pylonDone; err != nil {
			t.Errorf("pylon: %v", err)
		}
		g.Shutdown()
		<-served
		<-served
	})
	f.waitRoutable(t)
	return f
}

func (f *tlsFleet) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI("https://" + f.public + path)
	req.SetBodyString(body)
	if err := f.client.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode(), string(resp.Body())
}

// waitRoutable polls the public /v1/models until the model is listed (the pylon has
// registered over mutual TLS and the gateway's probe reached it over mutual TLS).
func (f *tlsFleet) waitRoutable(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, body := f.do(t, "GET", "/v1/models", ""); strings.Contains(body, "dummy-model") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the pylon never became routable over TLS")
}

// handshake dials addr over TLS with the given client certificates and reports the
// handshake's error, and the server certificate's serial when it succeeded.
func handshake(addr string, roots *x509.CertPool, certs []tls.Certificate) (string, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})
	if err != nil {
		return "", err
	}
	defer c.Close()
	// TLS 1.3 reports a refused client certificate on the first read, not in Handshake.
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// The whole path over TLS — client → gateway → pylon → engine, mutual TLS between gateway
// and pylon both ways, the pylon's stats stream and KV polls over TLS too — serves plain and streamed completions; the mutual-TLS listeners
// refuse clients without a certificate; a certificate rotated on disk is served to the
// next new connection without a restart.
func TestLoopbackTLSFullPath(t *testing.T) {
	f := startTLSFleet(t)
	status, body := f.do(t, "POST", "/v1/chat/completions", `{"model":"dummy-model","messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || !strings.Contains(body, `"choices"`) {
		t.Fatalf("chat over TLS: %d %s", status, body)
	}
	status, body = f.do(t, "POST", "/v1/chat/completions", `{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || strings.Count(body, "data: {") < 5 || !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("streamed chat over TLS: %d %s", status, body)
	}

	// The pylon's engine loops reach the HTTPS engine: its admin /metrics (over TLS, no
	// client certificate needed there) shows the stats stream connected.
	admin := &fasthttp.HostClient{Addr: f.pylonAd, IsTLS: true, TLSConfig: &tls.Config{RootCAs: f.ca.Pool(), MinVersion: tls.VersionTLS12}}
	defer admin.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, m, err := admin.Get(nil, "https://"+f.pylonAd+"/metrics")
		if err == nil && status == 200 && strings.Contains(string(m), `pylon_engine_stats_stream_connected{mode="auto"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pylon's stats stream never connected to the HTTPS engine: %v %d", err, status)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Mutual TLS: the gateway's admin listener and the pylon's data listener refuse a
	// client without a certificate; the public listener does not ask for one.
	for _, addr := range []string{f.admin, f.pylonData} {
		if _, err := handshake(addr, f.ca.Pool(), nil); err == nil {
			t.Errorf("%s accepted a client without a certificate", addr)
		}
	}
	before, err := handshake(f.public, f.ca.Pool(), nil)
	if err != nil {
		t.Fatalf("public listener: %v", err)
	}

	// Rotation: a new certificate written over the old files is served to the next
	// connection.
	newCert, newKey := f.ca.Issue(t, "gateway-next", "127.0.0.1", "localhost")
	for src, dst := range map[string]string{newCert: f.gwCert, newKey: f.gwKey} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		tlstest.Replace(t, dst, data)
	}
	after, err := handshake(f.public, f.ca.Pool(), nil)
	if err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if after == before {
		t.Errorf("the rotated certificate was not served (serial %s both times)", before)
	}
	if status, _ := f.do(t, "POST", "/v1/chat/completions", `{"model":"dummy-model","messages":[{"role":"user","content":"again"}]}`); status != 200 {
		t.Errorf("chat after rotation: %d", status)
	}
}

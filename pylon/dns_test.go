package pylon_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/internal/tlsx/tlstest"
	"github.com/switchyard/switchyard/pylon"
)

// With --gateway-dns the pylon registers with every address the name resolves to, follows
// the set as it changes (a new replica gets a registration within one re-resolution, a
// vanished one a DELETE and nothing more), keeps the set when a lookup fails, and
// deregisters from every current replica on shutdown.
func TestHermeticGatewayDNSDiscovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type hit struct {
			host, method string
			at           time.Duration
		}
		start := time.Now()
		var (
			mu      sync.Mutex
			hits    []hit
			records = []string{"10.0.0.1"}
			failing bool
		)
		lns := map[string]*fasthttputil.InmemoryListener{"engine": fasthttputil.NewInmemoryListener(), "pylon": fasthttputil.NewInmemoryListener(), "admin": fasthttputil.NewInmemoryListener()}
		servers := make([]*fasthttp.Server, 0, 2)
		var wg sync.WaitGroup
		for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
			ln := fasthttputil.NewInmemoryListener()
			lns[ip] = ln
			s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
				mu.Lock()
				hits = append(hits, hit{host: ip, method: string(ctx.Method()), at: time.Since(start)})
				mu.Unlock()
				ctx.SetBodyString(`{"gateway_id":"gw-` + ip + `","heartbeat_ms":1000}`)
			}}
			servers = append(servers, s)
			wg.Go(func() { _ = s.Serve(ln) })
		}
		eng, err := mock.New(mock.Config{NumTokens: 1}, mock.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		engineLn := lns["engine"]
		wg.Go(func() { _ = eng.Serve(engineLn) })
		dial := func(addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			if ln, ok := lns[host]; ok {
				return ln.Dial()
			}
			return nil, fmt.Errorf("no listener for %s", addr)
		}
		cfg := pylon.DefaultConfig()
		cfg.UpstreamBaseURL, cfg.AdvertiseURL, cfg.ModelNames = "http://engine", "http://pylon:8100", []string{"m"}
		cfg.GatewayDNS, cfg.GatewayDNSInterval, cfg.MinUpdateInterval = "gateways.test:8000", 5*time.Second, 10*time.Second
		lookup := func(_ context.Context, host string) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			if host != "gateways.test" {
				return nil, fmt.Errorf("unexpected lookup of %s", host)
			}
			if failing {
				return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
			}
			return slices.Clone(records), nil
		}
		p, err := pylon.New(cfg, pylon.Deps{Listener: lns["pylon"], AdminListener: lns["admin"], Dial: dial, LookupHost: lookup, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()

		count := func(host, method string, from, to time.Duration) int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, h := range hits {
				if h.host == host && h.method == method && h.at >= from && h.at < to {
					n++
				}
			}
			return n
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if count("10.0.0.1", "PUT", 0, time.Second) == 0 || count("10.0.0.2", "PUT", 0, 4*time.Second) != 0 {
			t.Fatalf("at start: %+v", hits)
		}
		mu.Lock()
		records = []string{"10.0.0.1", "10.0.0.2"} // a replica joins
		mu.Unlock()
		time.Sleep(2 * time.Second) // the re-resolution at 5 s
		synctest.Wait()
		if count("10.0.0.2", "PUT", 5*time.Second, 5*time.Second+time.Millisecond) == 0 {
			t.Fatalf("the new replica got no registration at 5 s: %+v", hits)
		}
		mu.Lock()
		failing = true // the lookup at 10 s fails: the set stays
		mu.Unlock()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		mu.Lock()
		failing, records = false, []string{"10.0.0.2"} // replica 1 goes away
		mu.Unlock()
		time.Sleep(5 * time.Second) // the re-resolution at 15 s
		synctest.Wait()
		if count("10.0.0.1", "DELETE", 15*time.Second, 16*time.Second) != 1 || count("10.0.0.1", "DELETE", 0, 15*time.Second) != 0 {
			t.Fatalf("vanished replica: %+v", hits)
		}
		// The vanished replica's registration gauge goes (a 0 would read as failing).
		admin := &fasthttp.HostClient{Addr: "admin", Dial: func(string) (net.Conn, error) { return lns["admin"].Dial() }}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://admin/metrics")
		if err := admin.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if m := string(resp.Body()); strings.Contains(m, `router="http://10.0.0.1:8000"`) || !strings.Contains(m, `pylon_registration_stream_connected{router="http://10.0.0.2:8000"} 1`) {
			t.Errorf("registration gauges after replica 1 vanished:\n%s", m)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		admin.CloseIdleConnections()
		time.Sleep(25 * time.Second) // two more heartbeats
		synctest.Wait()
		if n := count("10.0.0.1", "PUT", 15*time.Second+time.Millisecond, time.Hour); n != 0 {
			t.Errorf("%d registrations to the vanished replica", n)
		}
		if n := count("10.0.0.2", "PUT", 16*time.Second, time.Hour); n < 2 {
			t.Errorf("%d heartbeats to the remaining replica, want ≥ 2", n)
		}
		stopAt := time.Since(start)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if count("10.0.0.2", "DELETE", stopAt, time.Hour) != 1 || count("10.0.0.1", "DELETE", stopAt, time.Hour) != 0 {
			t.Errorf("shutdown deregistration: %+v", hits)
		}
		_ = eng.Close()
		for _, s := range servers {
			_ = s.Shutdown()
		}
		wg.Wait()
		time.Sleep(time.Minute)
	})
}

// --gateway-dns https://NAME:PORT registers with every address over TLS, verifying each
// replica's certificate against the name given by ClientTLS.ServerName (replicas resolve
// to bare IPs that their certificates do not name).
func TestHermeticGatewayDNSOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	cert, key := ca.Issue(t, "gateways", "gateways.test")
	serverTLS, err := tlsx.ServerConfig(tlsx.ServerOptions{CertFile: cert, KeyFile: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		puts := map[string]int{} // by replica, registrations received over TLS
		lns := map[string]*fasthttputil.InmemoryListener{"engine": fasthttputil.NewInmemoryListener(), "pylon": fasthttputil.NewInmemoryListener()}
		var wg sync.WaitGroup
		servers := make([]*fasthttp.Server, 0, 2)
		for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
			ln := fasthttputil.NewInmemoryListener()
			lns[ip] = ln
			s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
				if ctx.IsPut() && ctx.IsTLS() {
					mu.Lock()
					puts[ip]++
					mu.Unlock()
				}
				ctx.SetBodyString(`{"gateway_id":"gw-` + ip + `","heartbeat_ms":1000}`)
			}}
			servers = append(servers, s)
			wg.Go(func() { _ = s.Serve(tls.NewListener(ln, serverTLS)) })
		}
		eng, err := mock.New(mock.Config{NumTokens: 1}, mock.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		engineLn := lns["engine"]
		wg.Go(func() { _ = eng.Serve(engineLn) })
		dial := func(addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			if ln, ok := lns[host]; ok {
				return ln.Dial()
			}
			return nil, fmt.Errorf("no listener for %s", addr)
		}
		cfg := pylon.DefaultConfig()
		cfg.UpstreamBaseURL, cfg.AdvertiseURL, cfg.ModelNames = "http://engine", "http://pylon:8100", []string{"m"}
		cfg.GatewayDNS, cfg.GatewayDNSInterval = "https://gateways.test:8001", 5*time.Second
		cfg.ClientTLS = tlsx.ClientOptions{CAFile: ca.CertFile(), ServerName: "gateways.test"}
		lookup := func(context.Context, string) ([]string, error) { return []string{"10.0.0.1", "10.0.0.2"}, nil }
		p, err := pylon.New(cfg, pylon.Deps{Listener: lns["pylon"], Dial: dial, LookupHost: lookup, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		got := maps.Clone(puts)
		mu.Unlock()
		if got["10.0.0.1"] == 0 || got["10.0.0.2"] == 0 {
			t.Errorf("registrations over TLS by replica: %v, want both", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		for _, s := range servers {
			_ = s.Shutdown()
		}
		_ = eng.Close()
		wg.Wait()
		time.Sleep(time.Minute) // idle connection cleaners exit (virtual time)
	})
}

// --gateway-dns accepts host:port with an optional http:// or https:// prefix only.
func TestGatewayDNSForms(t *testing.T) {
	for v, ok := range map[string]bool{
		"gw:8001": true, "http://gw:8001": true, "https://gw:8001": true, "https://gw:8001/": true,
		"gw": false, "ftp://gw:8001": false, "https://gw": false, "https://:8001": false,
	} {
		cfg := pylon.DefaultConfig()
		cfg.UpstreamBaseURL, cfg.GatewayDNS = "http://engine:80", v
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("--gateway-dns %q: %v, want ok=%v", v, err, ok)
		}
	}
}

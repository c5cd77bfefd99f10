package pylon_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/engines/mock"
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
		lns := map[string]*fasthttputil.InmemoryListener{"engine": fasthttputil.NewInmemoryListener(), "pylon": fasthttputil.NewInmemoryListener()}
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
		p, err := pylon.New(cfg, pylon.Deps{Listener: lns["pylon"], Dial: dial, LookupHost: lookup, Logger: slog.New(slog.DiscardHandler)})
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

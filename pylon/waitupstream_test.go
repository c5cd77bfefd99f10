package pylon_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/pylon"
)

// freeAddr returns a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// serveModels starts an engine stand-in on addr that answers GET /v1/models.
func serveModels(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"object":"list","data":[{"id":"dummy-model","object":"model"}]}`)
	}}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		<-done
	})
}

// --wait-for-upstream: the pylon registers only once its engine answers GET /v1/models.
func TestWaitForUpstreamRegistersAfterTheEngine(t *testing.T) {
	cs := startControl(t)
	addr := freeAddr(t)
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.ModelNames, cfg.Gateways = "http://"+addr, []string{"dummy-model"}, []string{cs.url}
	cfg.EngineStatsStream, cfg.CanaryInterval = "off", 0
	cfg.WaitForUpstream = 30 * time.Second
	startPylon(t, cfg)
	time.Sleep(300 * time.Millisecond) // the engine starts later than its pylon
	cs.mu.Lock()
	early := len(cs.regs)
	cs.mu.Unlock()
	if early != 0 {
		t.Fatalf("%d registrations before the engine answered", early)
	}
	up := time.Now()
	serveModels(t, addr)
	if r := cs.await(t, 10*time.Second, func(r received) bool { return r.method == "PUT" }); r.at.Before(up) {
		t.Errorf("registered at %v, before the engine came up at %v", r.at, up)
	}
}

// An engine that never answers within --wait-for-upstream makes Run fail, naming the
// flag, without registering.
func TestWaitForUpstreamGivesUp(t *testing.T) {
	cs := startControl(t)
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.ModelNames, cfg.Gateways = "http://"+freeAddr(t), []string{"dummy-model"}, []string{cs.url}
	cfg.EngineStatsStream, cfg.CanaryInterval, cfg.DrainTimeout = "off", 0, time.Second
	cfg.WaitForUpstream = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := pylon.New(cfg, pylon.Deps{Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--wait-for-upstream") {
		t.Errorf("Run: %v, want an error naming --wait-for-upstream", err)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, r := range cs.regs {
		if r.method == "PUT" {
			t.Errorf("registered although the engine never answered: %+v", r)
		}
	}
}

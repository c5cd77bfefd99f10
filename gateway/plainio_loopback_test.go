package gateway_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/pylon"
)

// With --raw-socket-io=false on both, a gateway and two pylons on real 127.0.0.1 sockets
// serve a buffered request and a stream end to end, and a pylon's first-output timeout
// still ends a request its engine is too slow to answer.
func TestLoopbackPlainSocketIO(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback test")
	}
	pub, adm := listenLoopback(t), listenLoopback(t)
	g, err := gateway.New(gateway.Config{GatewayID: "gw-plain", NoRawSocketIO: true}, gateway.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{}, 2)
	go func() { _ = g.Serve(pub); served <- struct{}{} }()
	go func() { _ = g.ServeAdmin(adm); served <- struct{}{} }()

	ctx, cancel := context.WithCancel(context.Background())
	pylons := make(chan error, 2)
	startPylon := func(id, model string, engine mock.Config, firstOutput time.Duration) {
		engine.ModelNames = []string{model}
		cfg := pylon.DefaultConfig()
		cfg.UpstreamBaseURL, cfg.ModelNames, cfg.ID = startEngine(t, engine), []string{model}, id
		cfg.Gateways = []string{"http://" + adm.Addr().String()}
		cfg.InitialInputTPS, cfg.PinInputTPS, cfg.DrainTimeout = 1000, true, time.Second
		cfg.MinUpdateInterval, cfg.CanaryInterval, cfg.EngineStatsStream = 200*time.Millisecond, 0, "off"
		cfg.FirstOutputTimeout, cfg.NoRawSocketIO = firstOutput, true
		p, err := pylon.New(cfg, pylon.Deps{Listener: listenLoopback(t), AdminListener: listenLoopback(t), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		go func() { pylons <- p.Run(ctx) }()
	}
	startPylon("p-fast", "fast-model", mock.Config{NumTokens: 5}, 30*time.Second)
	startPylon("p-slow", "slow-model", mock.Config{NumTokens: 5, TTFT: 2 * time.Second}, 200*time.Millisecond)

	client := &fasthttp.HostClient{Addr: pub.Addr().String()}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		cancel()
		for range 2 {
			if err := <-pylons; err != nil {
				t.Errorf("pylon: %v", err)
			}
		}
		g.Shutdown()
		<-served
		<-served
	})
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod(method)
		req.SetRequestURI("http://" + pub.Addr().String() + path)
		req.SetBodyString(body)
		if err := client.DoTimeout(req, resp, 10*time.Second); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode(), string(resp.Body())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, body := do("GET", "/v1/models", ""); strings.Contains(body, "fast-model") && strings.Contains(body, "slow-model") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pylons never became routable")
		}
		time.Sleep(10 * time.Millisecond)
	}

	chat := func(model string, stream bool) string {
		s := ""
		if stream {
			s = `"stream":true,`
		}
		return `{"model":"` + model + `",` + s + `"messages":[{"role":"user","content":"hello"}]}`
	}
	if status, body := do("POST", "/v1/chat/completions", chat("fast-model", false)); status != 200 || !strings.Contains(body, `"choices"`) {
		t.Errorf("buffered request: %d %s", status, body)
	}
	if status, body := do("POST", "/v1/chat/completions", chat("fast-model", true)); status != 200 ||
		strings.Count(body, "data: ") < 5 || !strings.Contains(body, "data: [DONE]") {
		t.Errorf("stream: %d %s", status, body)
	}
	start := time.Now()
	status, body := do("POST", "/v1/chat/completions", chat("slow-model", false))
	if took := time.Since(start); status != 504 || !strings.Contains(body, "first_output_timeout") || took >= 2*time.Second {
		t.Errorf("a request past the pylon's first-output timeout: %d %s after %v, want 504 first_output_timeout before the engine's 2s", status, body, took)
	}
}

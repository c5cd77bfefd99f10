package gateway_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// harness runs a gateway and fake pylons over in-memory listeners (inside a synctest
// bubble: exact virtual timings).
type harness struct {
	t       *testing.T
	g       *gateway.Gateway
	gwLn    *fasthttputil.InmemoryListener
	adminLn *fasthttputil.InmemoryListener
	client  *fasthttp.HostClient
	admin   *fasthttp.HostClient // the admin listener: control, /metrics, /debug
	mu      sync.Mutex
	lns     map[string]*fasthttputil.InmemoryListener
	servers []*fasthttp.Server
	done    sync.WaitGroup
}

func newHarness(t *testing.T, cfg gateway.Config, lbConfig string) *harness {
	t.Helper()
	return newLoggedHarness(t, cfg, lbConfig, slog.New(slog.DiscardHandler))
}

// newLoggedHarness is newHarness with the gateway logging to logger.
func newLoggedHarness(t *testing.T, cfg gateway.Config, lbConfig string, logger *slog.Logger) *harness {
	t.Helper()
	return newHarnessDeps(t, cfg, lbConfig, gateway.Deps{Logger: logger})
}

// newHarnessDeps is newHarness with the gateway's dependencies deps (Now, Dial and a
// missing Logger filled in).
func newHarnessDeps(t *testing.T, cfg gateway.Config, lbConfig string, deps gateway.Deps) *harness {
	t.Helper()
	h := &harness{t: t, lns: map[string]*fasthttputil.InmemoryListener{}, gwLn: fasthttputil.NewInmemoryListener(), adminLn: fasthttputil.NewInmemoryListener()}
	if lbConfig != "" {
		cfg.LBConfigPath = filepath.Join(t.TempDir(), "lb-config.json")
		if err := os.WriteFile(cfg.LBConfigPath, []byte(lbConfig), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg.GatewayID = "gw-test"
	deps.Now, deps.Dial = time.Now, h.dial
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	g, err := gateway.New(cfg, deps)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	h.g = g
	h.done.Add(2)
	go func() {
		defer h.done.Done()
		_ = g.Serve(h.gwLn)
	}()
	go func() {
		defer h.done.Done()
		_ = g.ServeAdmin(h.adminLn)
	}()
	h.client = &fasthttp.HostClient{Addr: "gateway", Dial: func(string) (net.Conn, error) { return h.gwLn.Dial() }}
	h.admin = &fasthttp.HostClient{Addr: "gateway-admin", Dial: func(string) (net.Conn, error) { return h.adminLn.Dial() }}
	t.Cleanup(h.close)
	return h
}

func (h *harness) dial(addr string) (net.Conn, error) {
	h.mu.Lock()
	ln := h.lns[addr]
	h.mu.Unlock()
	if ln == nil {
		return nil, fmt.Errorf("no listener at %s", addr)
	}
	return ln.Dial()
}

func (h *harness) close() {
	h.client.CloseIdleConnections()
	h.admin.CloseIdleConnections()
	h.g.Shutdown()
	for _, s := range h.servers {
		_ = s.Shutdown()
	}
	h.done.Wait()
	time.Sleep(time.Minute) // idle cleaners and protoactor throttles exit (virtual time)
}

// fakePylon is a scripted pylon: it answers /health and every inference request with
// respond, adding an x-pylon-load report for its current load.
type fakePylon struct {
	id, cluster, addr string
	mu                sync.Mutex
	load              load.Load
	calls             int
	seq               uint64
	build             uint64 // the snapshot build its reports carry (0 = none)
	respond           func(call int, ctx *fasthttp.RequestCtx)
	lastHeaders       map[string]string
	frozen            chan struct{} // while set, every request, /health included, waits for it to close
}

// freeze makes p answer nothing, not even /health, until the returned function runs.
func (p *fakePylon) freeze() (thaw func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.frozen = ch
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.frozen = nil
		p.mu.Unlock()
		close(ch)
	}
}

func (h *harness) pylon(id, cluster string, l load.Load, respond func(int, *fasthttp.RequestCtx)) *fakePylon {
	p := &fakePylon{id: id, cluster: cluster, addr: id + ":80", load: l, respond: respond}
	ln := fasthttputil.NewInmemoryListener()
	h.mu.Lock()
	h.lns[p.addr] = ln
	h.mu.Unlock()
	s := &fasthttp.Server{Handler: p.handle}
	h.servers = append(h.servers, s)
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		_ = s.Serve(ln)
	}()
	return p
}

func (p *fakePylon) handle(ctx *fasthttp.RequestCtx) {
	p.mu.Lock()
	frozen := p.frozen
	p.mu.Unlock()
	if frozen != nil {
		<-frozen
	}
	if string(ctx.Path()) == wire.HealthPath {
		ctx.SetBodyString("ok")
		return
	}
	p.mu.Lock()
	p.calls++
	call := p.calls
	if _, seq, err := wire.ParseDispatchSeq(string(ctx.Request.Header.Peek(wire.HeaderDispatchSeq))); err == nil {
		p.seq = max(p.seq, seq)
	}
	p.lastHeaders = map[string]string{}
	for k, v := range ctx.Request.Header.All() {
		p.lastHeaders[string(k)] = string(v)
	}
	report := wire.LoadReport{Model: string(ctx.Request.Header.Peek(wire.HeaderModel)), Load: p.load, DispatchSeq: p.seq, Build: p.build}
	p.mu.Unlock()
	ctx.Response.Header.Set(wire.HeaderPylonLoad, string(wire.AppendLoadReport(nil, &report)))
	if p.respond != nil {
		p.respond(call, ctx)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"served_by":"` + p.id + `"}`)
}

func (p *fakePylon) header(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastHeaders[name]
}

// register PUTs p's registration (model "m") and waits for its first RTT probe.
func (h *harness) register(p *fakePylon) {
	h.t.Helper()
	h.registerBeating(p, 60_000)
}

// registerBeating is register with a heartbeat of hbMs: the backend expires three
// heartbeats (at least the gateway's MinExpiry) later unless registered again.
func (h *harness) registerBeating(p *fakePylon, hbMs uint64) {
	h.t.Helper()
	h.registerModel(p, "m", hbMs)
}

// registerModel is registerBeating with p serving model alone.
func (h *harness) registerModel(p *fakePylon, model string, hbMs uint64) {
	h.t.Helper()
	reg := wire.Registration{
		ID: p.id, URL: "http://" + p.addr, ClusterID: p.cluster, HeartbeatMs: hbMs,
		Models: map[string]wire.Model{model: {Status: wire.StatusActive, Generation: 1, Stats: wire.StatsFromLoad(&p.load)}},
	}
	body, _ := json.Marshal(reg)
	resp := h.do("PUT", wire.RegistrationPath+p.id, body, nil)
	if resp.status != 200 {
		h.t.Fatalf("register %s: %d %s", p.id, resp.status, resp.body)
	}
	synctest.Wait() // first RTT probe and the actors settle
}

type response struct {
	status  int
	body    string
	headers map[string]string
}

func (h *harness) do(method, path string, body []byte, headers map[string]string) response {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://gateway" + path)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.SetBody(body)
	c := h.client
	if adminPath(path) {
		c = h.admin
	}
	if err := c.Do(req, resp); err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	out := response{status: resp.StatusCode(), body: string(resp.Body()), headers: map[string]string{}}
	for k, v := range resp.Header.All() {
		out.headers[string(k)] = string(v)
	}
	return out
}

// adminPath tells the paths the admin listener serves (the tests' requests for them go there).
func adminPath(path string) bool {
	return strings.HasPrefix(path, "/control/") || strings.HasPrefix(path, "/debug/") || strings.HasPrefix(path, "/metrics") || strings.HasPrefix(path, "/ui")
}

func (h *harness) chat(headers map[string]string) response {
	return h.do("POST", "/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`), headers)
}

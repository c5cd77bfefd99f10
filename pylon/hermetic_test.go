package pylon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// hermetic runs a pylon, an in-process mock engine and a test control endpoint over
// in-memory listeners. Used inside a synctest bubble, every timing is exact virtual time.
type hermetic struct {
	t       *testing.T
	lns     map[string]*fasthttputil.InmemoryListener // by host
	servers []*fasthttp.Server
	engine  *mock.Engine
	client  *fasthttp.HostClient // to the pylon
	admin   *fasthttp.HostClient // to the pylon's admin listener
	regs    chan received
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	pylon     *pylon.Pylon
	logs      *logRecorder
	pylonDone chan struct{}
	runErr    error
	// gone lists the request ids whose client the pylon's ClientGone reports gone
	// (in-memory connections have no socket to peek at).
	gone sync.Map
}

// newHermetic starts everything; cfg gets the upstream, gateway and advertise URLs.
func newHermetic(t *testing.T, cfg pylon.Config, engineCfg mock.Config) *hermetic {
	t.Helper()
	h := &hermetic{t: t, lns: map[string]*fasthttputil.InmemoryListener{}, regs: make(chan received, 1024)}
	for _, host := range []string{"engine", "gateway", "pylon", "pylon-admin"} {
		h.lns[host] = fasthttputil.NewInmemoryListener()
	}
	engineCfg.EnableTestControl = true // canary and calibration tests drive /test-control
	eng, err := mock.New(engineCfg, mock.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	h.engine = eng
	h.wg.Go(func() { _ = eng.Serve(h.lns["engine"]) })

	ctl := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		r := received{at: time.Now(), method: string(ctx.Method()), auth: string(ctx.Request.Header.Peek("Authorization"))}
		if r.method == "PUT" {
			reg, err := wire.DefaultLimits().ParseRegistration(strings.TrimPrefix(string(ctx.Path()), wire.RegistrationPath), ctx.PostBody())
			if err != nil {
				ctx.Error(err.Error(), 400)
				return
			}
			r.reg = reg
		}
		h.regs <- r
		body, _ := json.Marshal(wire.RegistrationAck{GatewayID: "gw-test", HeartbeatMs: 1000})
		ctx.SetBody(body)
	}}
	h.servers = append(h.servers, ctl)
	h.wg.Go(func() { _ = ctl.Serve(h.lns["gateway"]) })

	cfg.UpstreamBaseURL, cfg.Gateways, cfg.AdvertiseURL = "http://engine", []string{"http://gateway"}, "http://pylon:8100"
	h.logs = &logRecorder{}
	clientGone := func(ctx *fasthttp.RequestCtx) bool {
		_, gone := h.gone.Load(string(ctx.Request.Header.Peek(wire.HeaderRequestID)))
		return gone
	}
	p, err := pylon.New(cfg, pylon.Deps{Listener: h.lns["pylon"], AdminListener: h.lns["pylon-admin"], Dial: h.dial, Logger: slog.New(h.logs), ClientGone: clientGone})
	if err != nil {
		t.Fatal(err)
	}
	h.pylon = p
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.pylonDone = make(chan struct{})
	go func() {
		defer close(h.pylonDone)
		h.runErr = p.Run(ctx)
	}()
	h.client = &fasthttp.HostClient{Addr: "pylon", Dial: h.dial}
	h.admin = &fasthttp.HostClient{Addr: "pylon-admin", Dial: h.dial}
	return h
}

func (h *hermetic) dial(addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ln, ok := h.lns[host]
	if !ok {
		return nil, fmt.Errorf("no listener for %s", addr)
	}
	return ln.Dial()
}

// close stops the pylon (it drains and deregisters while the engine and the control
// endpoint still run), then those, and lets idle cleaners and protoactor's throttles exit
// (a virtual minute). It returns the control requests received during the shutdown.
func (h *hermetic) close() []received {
	h.client.CloseIdleConnections()
	h.admin.CloseIdleConnections()
	h.cancel()
	var during []received
	for {
		select {
		case r := <-h.regs:
			during = append(during, r)
			continue
		case <-h.pylonDone:
		}
		break
	}
	for len(h.regs) > 0 {
		during = append(during, <-h.regs)
	}
	if h.runErr != nil {
		h.t.Errorf("Run: %v", h.runErr)
	}
	if h.engine != nil { // nil: a stand-in engine among h.servers
		_ = h.engine.Close()
	}
	for _, s := range h.servers {
		_ = s.Shutdown()
	}
	h.wg.Wait()
	time.Sleep(time.Minute)
	return during
}

// await returns the first registration satisfying ok within d (virtual time).
func (h *hermetic) await(d time.Duration, ok func(received) bool) received {
	h.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case r := <-h.regs:
			if ok(r) {
				return r
			}
		case <-timeout:
			h.t.Fatalf("no matching registration within %v", d)
		}
	}
}

func running(n uint64) func(received) bool {
	return func(r received) bool {
		s, ok := modelStats(r, "dummy-model")
		return ok && s.NumRunningQueries == n
	}
}

// A pylon given a share of its engine's slots registers it, for gateways to count the
// pylon full once its own requests fill it.
func TestHermeticRegistrationCarriesSlotShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		cfg.Admission.SlotShare = 6
		h := newHermetic(t, cfg, mock.Config{TTFT: time.Millisecond, TokenDelay: time.Millisecond, NumTokens: 2})
		defer h.close()
		if r := h.await(time.Second, running(0)); r.reg.EngineSlotShare != 6 {
			t.Errorf("registration %+v, want engine_slot_share 6", r.reg)
		}
	})
}

// A registration carrying a just-started request reaches the gateway within one coalesce
// interval (exactly, on virtual time), and the response's x-pylon-load includes the request.
func TestHermeticRegistrationWithinOneCoalesceInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		cfg.MinUpdateInterval = 5 * time.Second // heartbeats cannot explain a fast update
		cfg.StatsUpdateCoalesce = 50 * time.Millisecond
		h := newHermetic(t, cfg, mock.Config{TTFT: 300 * time.Millisecond, TokenDelay: time.Millisecond, NumTokens: 2})
		defer h.close()

		first := h.await(time.Second, running(0))
		if first.reg.URL != "http://pylon:8100" || first.reg.ClusterID != "pylon" || first.reg.DispatchSeq != 0 || first.reg.EngineSlotShare != 0 {
			t.Errorf("registration identity: %+v", first.reg)
		}
		time.Sleep(time.Second) // the ack-driven resend (gateway id learned) has gone out
		for len(h.regs) > 0 {
			<-h.regs
		}

		start := time.Now()
		type result struct {
			status int
			load   string
			err    error
		}
		res := make(chan result, 1)
		go func() {
			req := chatRequest("http://pylon", "reg-1", 100, nil)
			defer fasthttp.ReleaseRequest(req)
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			err := h.client.Do(req, resp)
			res <- result{resp.StatusCode(), string(resp.Header.Peek(wire.HeaderPylonLoad)), err}
		}()
		r := h.await(time.Second, running(1))
		lag := r.at.Sub(start)
		t.Logf("registration with the running request arrived %v after the request started", lag)
		if lag > cfg.StatsUpdateCoalesce {
			t.Errorf("registration with the running request arrived %v after the request started, want ≤ %v", lag, cfg.StatsUpdateCoalesce)
		}
		// A second request 10 ms later rides on the coalesce window: its registration
		// goes out exactly one interval after the previous one.
		time.Sleep(10 * time.Millisecond)
		res2 := make(chan error, 1)
		go func() {
			req := chatRequest("http://pylon", "reg-2", 100, nil)
			defer fasthttp.ReleaseRequest(req)
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			res2 <- h.client.Do(req, resp)
		}()
		r2 := h.await(time.Second, running(2))
		if d := r2.at.Sub(r.at); d != cfg.StatsUpdateCoalesce {
			t.Errorf("coalesced registration %v after the previous one, want exactly %v", d, cfg.StatsUpdateCoalesce)
		}
		if err := <-res2; err != nil {
			t.Fatal(err)
		}
		got := <-res
		if got.err != nil || got.status != 200 {
			t.Fatalf("request: %v %d", got.err, got.status)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Errorf("the response ended after %v, before the engine's TTFT", d)
		}
		lr, err := wire.ParseLoadReport(got.load)
		if err != nil || lr.Load.RunningRequests == 0 || lr.Model != "dummy-model" {
			t.Errorf("x-pylon-load %q = %+v, %v; want this request counted", got.load, lr, err)
		}
		// After the stream ends the next registration shows the pylon idle again.
		h.await(time.Second, running(0))
	})
}

// The pylon echoes the highest dispatch sequence it admitted from each gateway: in
// x-pylon-load to the sender, and in the registration to that gateway only (learned from
// its ack); registrations carry the bearer token; a clean stop deregisters with DELETE.
func TestHermeticDispatchSeqTokenAndDeregistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream, cfg.ControlToken = []string{"dummy-model"}, "off", "tok"
		cfg.DrainTimeout = time.Second
		h := newHermetic(t, cfg, mock.Config{NumTokens: 1})
		first := h.await(time.Second, running(0))
		if first.auth != "Bearer tok" || first.reg.DispatchSeq != 0 {
			t.Errorf("first registration: auth %q, dispatch_seq %d", first.auth, first.reg.DispatchSeq)
		}
		send := func(seq string) wire.LoadReport {
			t.Helper()
			req := chatRequest("http://pylon", "seq-"+seq, 10, map[string]string{wire.HeaderDispatchSeq: seq})
			defer fasthttp.ReleaseRequest(req)
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			if err := h.client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				t.Fatalf("request %s: %v %d", seq, err, resp.StatusCode())
			}
			lr, err := wire.ParseLoadReport(string(resp.Header.Peek(wire.HeaderPylonLoad)))
			if err != nil {
				t.Fatal(err)
			}
			return lr
		}
		if lr := send("gw-test/7"); lr.DispatchSeq != 7 {
			t.Errorf("x-pylon-load seq %d, want 7", lr.DispatchSeq)
		}
		if lr := send("other-gw/9"); lr.DispatchSeq != 9 {
			t.Errorf("x-pylon-load seq %d to the other gateway, want 9", lr.DispatchSeq)
		}
		if lr := send("gw-test/5"); lr.DispatchSeq != 7 {
			t.Errorf("x-pylon-load seq %d after an older dispatch, want the highest 7", lr.DispatchSeq)
		}
		r := h.await(2*time.Second, func(r received) bool { return r.reg.DispatchSeq != 0 })
		if r.reg.DispatchSeq != 7 || r.auth != "Bearer tok" {
			t.Errorf("registration to gw-test: dispatch_seq %d (want 7, not the other gateway's 9), auth %q", r.reg.DispatchSeq, r.auth)
		}
		var deleted []received
		for _, r := range h.close() {
			if r.method == "DELETE" {
				deleted = append(deleted, r)
			}
		}
		if len(deleted) != 1 || deleted[0].auth != "Bearer tok" {
			t.Errorf("deregistration: %+v, want one DELETE with the token", deleted)
		}
	})
}

package controlplane_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/bench/controlplane"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
	"github.com/switchyard/switchyard/internal/wire"
)

func TestMain(m *testing.M) { mocktest.Main(m) }

// fakeGateway is a gateway's admin listener that checks the token and parses each
// registration and load update as the gateway does, answering as the gateway does (200 with
// an ack offering load updates when offer is set, 204) or 400; it records what it saw.
type fakeGateway struct {
	offer bool

	mu       sync.Mutex
	full     map[string]int // full registrations per backend id
	probes   int            // GET /healthz
	updates  map[string]int // load updates per backend id
	conns    int            // connections opened
	problems []string
}

func (g *fakeGateway) handle(ctx *fasthttp.RequestCtx) {
	id, _ := strings.CutPrefix(string(ctx.Path()), wire.RegistrationPath)
	g.mu.Lock()
	defer g.mu.Unlock()
	var problem string
	switch {
	case string(ctx.Request.Header.Peek("Authorization")) != "Bearer tok":
		problem = "no token"
	case ctx.IsGet() && string(ctx.Path()) == "/healthz":
		g.probes++
		return
	case ctx.IsPut():
		reg, err := wire.DefaultLimits().ParseRegistration(id, ctx.PostBody())
		switch {
		case err != nil:
			problem = err.Error()
		case reg.HeartbeatMs != 200 || reg.Models["m"].Status != "ACTIVE" || string(ctx.Request.Header.ContentType()) != "application/json":
			problem = "unexpected registration"
		default:
			g.full[id]++
			b, _ := json.Marshal(wire.RegistrationAck{GatewayID: "gw", HeartbeatMs: 1000, LoadUpdates: g.offer})
			ctx.SetBody(b)
			return
		}
	case ctx.IsPatch():
		u, err := wire.DefaultLimits().ParseLoadUpdate(ctx.PostBody())
		switch {
		case err != nil:
			problem = err.Error()
		case !g.offer || g.full[id] == 0 || len(u.Models) != 1 || u.Models[0].Model != "m" || string(ctx.Request.Header.ContentType()) != wire.LoadUpdateContentType:
			problem = "unexpected load update"
		default:
			g.updates[id]++
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
	default:
		problem = "method " + string(ctx.Method())
	}
	g.problems = append(g.problems, problem)
	ctx.SetStatusCode(fasthttp.StatusBadRequest)
}

// run simulates 20 pylons heartbeating every 200 ms against g for 2 s (virtual time, over
// an in-memory listener) and returns their counts.
func run(t *testing.T, g *fakeGateway, fullInterval time.Duration, baseline bool) *controlplane.Stats {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	s := &fasthttp.Server{Handler: g.handle, ConnState: func(_ net.Conn, st fasthttp.ConnState) {
		if st == fasthttp.StateNew {
			g.mu.Lock()
			g.conns++
			g.mu.Unlock()
		}
	}}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.Serve(ln)
	}()
	f, err := controlplane.Start(context.Background(), controlplane.Options{
		Admins: []string{"gateway:8001"}, Token: "tok", Pylons: 20, Period: 200 * time.Millisecond, FullInterval: fullInterval, Model: "m",
		URL:  func(int) string { return "http://127.0.0.1:1/p" },
		Dial: func(string) (net.Conn, error) { return ln.Dial() }, Baseline: baseline,
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	f.Stop()
	_ = s.Shutdown()
	<-served
	time.Sleep(time.Minute) // fasthttp's idle cleaners and protoactor's throttles exit
	return f.Stats()[0]
}

// The simulated pylons run the pylon's registrar and transport: each registers with the
// token and a valid snapshot on its own connection, then, with a gateway that offers them,
// sends load updates between full registrations (here at least every second).
func TestPylonsSendFullRegistrationsAndLoadUpdates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGateway{offer: true, full: map[string]int{}, updates: map[string]int{}}
		st := run(t, g, time.Second, false)
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.problems) > 0 || st.Failed.Load() != 0 {
			t.Fatalf("problems %v, %d failed", g.problems, st.Failed.Load())
		}
		// 2 s of heartbeats every 200 ms: about 10 a pylon, of which 2 full registrations.
		if len(g.full) != 20 || len(g.updates) != 20 || st.Accepted.Load() < 180 || st.Full.Load()+st.Updates.Load() != st.Accepted.Load() {
			t.Fatalf("%d pylons registered, %d sent load updates; %d accepted (%d full, %d updates); want 20, 20, at least 180",
				len(g.full), len(g.updates), st.Accepted.Load(), st.Full.Load(), st.Updates.Load())
		}
		if st.Full.Load() > 60 || st.Updates.Load() < 3*st.Full.Load() {
			t.Errorf("%d load updates for %d full registrations: most heartbeats should be load updates", st.Updates.Load(), st.Full.Load())
		}
		if g.conns != 20 {
			t.Errorf("%d connections for 20 pylons, want one each", g.conns)
		}
	})
}

// Without load updates (a 0 full-registration interval, or a gateway that does not offer
// them) every heartbeat is a full registration.
func TestPylonsSendFullRegistrationsOnly(t *testing.T) {
	for name, c := range map[string]struct {
		offer        bool
		fullInterval time.Duration
	}{"interval 0": {true, 0}, "an older gateway": {false, time.Minute}} {
		synctest.Test(t, func(t *testing.T) {
			g := &fakeGateway{offer: c.offer, full: map[string]int{}, updates: map[string]int{}}
			st := run(t, g, c.fullInterval, false)
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.problems) > 0 || st.Failed.Load() != 0 || len(g.full) != 20 || len(g.updates) != 0 || st.Updates.Load() != 0 || st.Full.Load() < 180 {
				t.Errorf("%s: problems %v, %d failed, %d pylons, %d sent updates, %d full accepted", name, g.problems, st.Failed.Load(), len(g.full), len(g.updates), st.Full.Load())
			}
		})
	}
}

// The baseline: each simulated pylon GETs /healthz every period on its own connection,
// and registers nowhere.
func TestBaselineProbesHealthz(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGateway{full: map[string]int{}, updates: map[string]int{}}
		st := run(t, g, time.Second, true)
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.problems) > 0 || st.Failed.Load() != 0 || len(g.full) != 0 || g.probes < 180 || st.Accepted.Load() != int64(g.probes) || g.conns != 20 {
			t.Errorf("problems %v, %d failed, %d registered, %d probes (%d accepted), %d connections; want 0, 0, 0, at least 180, 20",
				g.problems, st.Failed.Load(), len(g.full), g.probes, st.Accepted.Load(), g.conns)
		}
	})
}

func TestStartRefusesAnEmptyFleet(t *testing.T) {
	if _, err := controlplane.Start(context.Background(), controlplane.Options{Pylons: 0}); err == nil {
		t.Fatal("Start accepted no pylons and no gateway")
	}
}

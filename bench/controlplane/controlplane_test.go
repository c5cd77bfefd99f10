package controlplane_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/bench/controlplane"
	"github.com/switchyard/switchyard/internal/wire"
)

// A fake gateway's admin listener: it checks the token and parses each registration as the
// gateway does, answering 200 or 400.
func TestPylonsRegisterWithTheTokenAndAValidSnapshotEveryPeriod(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	perID := map[string]int{}
	var problems []string
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		id, _ := strings.CutPrefix(string(ctx.Path()), wire.RegistrationPath)
		reg, err := wire.DefaultLimits().ParseRegistration(id, ctx.PostBody())
		mu.Lock()
		defer mu.Unlock()
		switch {
		case string(ctx.Request.Header.Peek("Authorization")) != "Bearer tok":
			problems = append(problems, "no token")
		case !ctx.IsPut():
			problems = append(problems, "method "+string(ctx.Method()))
		case err != nil:
			problems = append(problems, err.Error())
		case reg.HeartbeatMs != 200 || reg.Models["m"].Status != "ACTIVE":
			problems = append(problems, "unexpected registration")
		default:
			perID[id]++
			return
		}
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
	}}
	go func() { _ = s.Serve(ln) }()
	defer func() { _ = s.Shutdown() }()

	f, err := controlplane.Start(context.Background(), controlplane.Options{
		Admins: []string{ln.Addr().String()}, Token: "tok", Pylons: 20, Period: 200 * time.Millisecond, Model: "m",
		URL: func(int) string { return "http://127.0.0.1:1/p" },
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.Stats()[0].Accepted.Load() < 60 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	f.Stop()
	st := f.Stats()[0]
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 || st.Failed.Load() != 0 {
		t.Fatalf("problems %v, %d failed", problems, st.Failed.Load())
	}
	if len(perID) != 20 || st.Accepted.Load() < 60 {
		t.Fatalf("%d pylons seen, %d accepted; want 20 pylons, at least 60", len(perID), st.Accepted.Load())
	}
}

func TestStartRefusesAnEmptyFleet(t *testing.T) {
	if _, err := controlplane.Start(context.Background(), controlplane.Options{Pylons: 0}); err == nil {
		t.Fatal("Start accepted no pylons and no gateway")
	}
}

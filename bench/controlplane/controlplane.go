// Package controlplane simulates a fleet of pylons in one process: each registers with
// every gateway and then heartbeats as a real pylon does, because it runs the real pylon's
// registration client: one registrar actor per gateway (pylon/register, the pylon's
// cadence, full registrations and load updates alike) sending through the pylon's
// transport (register.HTTPTransport) on the pylon's own control client, so every
// simulated pylon holds its own keep-alive connection to each gateway. Its load numbers
// change from one heartbeat to the next. The bench's control-plane command measures what
// that costs the gateway.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/register"
)

// Options say what to simulate.
type Options struct {
	// Admins are the gateways' admin listeners (host:port); every pylon registers with each.
	Admins []string
	// Token is the control token (empty: none).
	Token string
	// Pylons is the fleet's size.
	Pylons int
	// Period is each pylon's heartbeat period (also sent as its heartbeat_ms).
	Period time.Duration
	// FullInterval is the pylons' --full-registration-interval: the longest time between
	// full registrations to a gateway that takes load updates (0: full registrations only,
	// as pylons sent before load updates).
	FullInterval time.Duration
	// Model is the one model every pylon serves.
	Model string
	// URL returns pylon i's advertised URL.
	URL func(i int) string
	// Dial connects to a gateway (default: TCP).
	Dial fasthttp.DialFunc
	// Baseline makes each simulated pylon GET the gateway's /healthz instead of sending
	// heartbeats, at the same rate and on its own connection: the cost of the HTTP
	// exchange alone, for comparison.
	Baseline bool
}

// Stats count what the pylons sent, per gateway.
type Stats struct {
	Sent     atomic.Int64
	Accepted atomic.Int64
	Failed   atomic.Int64
	// Full and Updates split Accepted into full registrations and load updates.
	Full    atomic.Int64
	Updates atomic.Int64
	// FirstErr is the first failure's text.
	FirstErr atomic.Pointer[string]
}

// Fleet is a running simulated fleet.
type Fleet struct {
	opts    Options
	stats   []*Stats
	sys     *actor.ActorSystem
	cancel  context.CancelFunc
	started sync.WaitGroup // the goroutine starting the pylons
	// baseline runs the /healthz loops (Options.Baseline); they end with ctx.
	baseline sync.WaitGroup
	ctx      context.Context
	sends    inFlight

	mu      sync.Mutex
	pids    []*actor.PID
	clients []*fasthttp.Client
}

// Start starts the fleet: pylon i's registrars start i/Pylons of a period after the
// start, so the heartbeats spread evenly over each period. Stop ends it.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	if opts.Pylons <= 0 || opts.Period <= 0 || len(opts.Admins) == 0 || opts.URL == nil {
		return nil, errors.New("controlplane: pylons > 0, a period, a URL function and at least one gateway are needed")
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Fleet{opts: opts, ctx: ctx, cancel: cancel, sys: actors.NewSystem(slog.New(slog.DiscardHandler))}
	for range opts.Admins {
		f.stats = append(f.stats, &Stats{})
	}
	f.started.Go(func() {
		t := time.NewTimer(0)
		defer t.Stop()
		start := time.Now()
		for i := range opts.Pylons {
			t.Reset(time.Until(start.Add(opts.Period * time.Duration(i) / time.Duration(opts.Pylons))))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			f.startPylon(i)
		}
	})
	return f, nil
}

// Stats returns each gateway's counts, in the order of Options.Admins.
func (f *Fleet) Stats() []*Stats { return f.stats }

// Stop stops every pylon and waits for their requests in flight.
func (f *Fleet) Stop() {
	f.cancel()
	f.started.Wait()
	f.baseline.Wait()
	f.mu.Lock()
	pids, clients := f.pids, f.clients
	f.pids, f.clients = nil, nil
	f.mu.Unlock()
	for _, pid := range pids {
		_ = f.sys.Root.PoisonFuture(pid).Wait()
	}
	f.sends.close()
	f.sys.Shutdown()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
}

// startPylon starts pylon i: its control client (a pylon's: one keep-alive connection per
// gateway) and one registrar per gateway (with Baseline, one /healthz loop per gateway).
func (f *Fleet) startPylon(i int) {
	o := &f.opts
	id := "sim-" + strconv.Itoa(i)
	client := &fasthttp.Client{Dial: o.Dial, NoDefaultUserAgentHeader: true, MaxIdleConnDuration: 10 * time.Second}
	send := register.HTTPTransport(client, nil)
	if o.Baseline {
		for g, admin := range o.Admins {
			f.baseline.Go(func() { f.probe(f.counted(f.stats[g], send), "http://"+admin+"/healthz") })
		}
		f.mu.Lock()
		f.clients = append(f.clients, client)
		f.mu.Unlock()
		return
	}
	pids := make([]*actor.PID, 0, len(o.Admins))
	for g, admin := range o.Admins {
		st := f.stats[g]
		var n atomic.Uint64 // this registrar's snapshots
		pids = append(pids, f.sys.Root.Spawn(register.Props(
			register.Config{GatewayURL: "http://" + admin, ID: id, Token: o.Token, Heartbeat: o.Period, FullInterval: o.FullInterval},
			register.Deps{
				Snapshot:  func(string) wire.Registration { return f.snapshot(i, id, n.Add(1)) },
				Transport: f.counted(st, send),
			})))
	}
	f.mu.Lock()
	f.pids = append(f.pids, pids...)
	f.clients = append(f.clients, client)
	f.mu.Unlock()
}

// probe GETs url every period until the fleet stops (Options.Baseline).
func (f *Fleet) probe(send register.Transport, url string) {
	t := time.NewTicker(f.opts.Period)
	defer t.Stop()
	for {
		_, _, _ = send(f.ctx, fasthttp.MethodGet, url, f.opts.Token, nil)
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// snapshot is pylon i's n-th snapshot: one active model whose numbers move between
// heartbeats, so the gateway's update is real work.
func (f *Fleet) snapshot(i int, id string, n uint64) wire.Registration {
	o := &f.opts
	return wire.Registration{
		ID: id, URL: o.URL(i), ClusterID: id,
		Models: map[string]wire.Model{o.Model: {Status: wire.StatusActive, Generation: 1, Build: n, Stats: wire.Stats{
			LastMeanInputTPS: 5000 + float64((int(n%100)+i)%100), OutputTPS: 800 + float64(n%50), QueueSize: n % 4,
			QueuedInputSize: (n % 4) * 512, MaxOutputTPS: 2000, KVCacheCapacityTokens: 1 << 20,
			KVCacheUsedTokens: (n * 997) % (1 << 20), NumRunningQueries: n % 32, MaxEngineConcurrency: 64,
			TotalQueryInputSize: (n % 32) * 1024, InputProcessingQueries: n % 3, OutputGenerationQueries: n % 29,
			StatsObservedAtUnixMs: time.Now().UnixMilli(),
		}}},
	}
}

// counted wraps send with st's counts: a 200 is an accepted full registration, a 204 an
// accepted load update, anything else a failure.
func (f *Fleet) counted(st *Stats, send register.Transport) register.Transport {
	return func(ctx context.Context, method, url, token string, body []byte) (int, []byte, error) {
		if !f.sends.enter() {
			return 0, nil, errStopped
		}
		defer f.sends.leave()
		st.Sent.Add(1)
		status, resp, err := send(ctx, method, url, token, body)
		switch {
		case err != nil:
			st.fail(method + ": " + err.Error())
		case status == fasthttp.StatusOK:
			st.Accepted.Add(1)
			if method != fasthttp.MethodGet {
				st.Full.Add(1)
			}
		case status == fasthttp.StatusNoContent:
			st.Accepted.Add(1)
			st.Updates.Add(1)
		default:
			st.fail(fmt.Sprintf("%s: status %d: %.200s", method, status, resp))
		}
		return status, resp, err
	}
}

func (s *Stats) fail(msg string) {
	s.Failed.Add(1)
	s.FirstErr.CompareAndSwap(nil, &msg)
}

// errStopped answers a send the registrar started after Stop.
var errStopped = errors.New("the simulated fleet stopped")

// inFlight counts the requests in flight; once closed it refuses new ones.
type inFlight struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // closed by the last request to leave after close
}

func (c *inFlight) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.n++
	return true
}

func (c *inFlight) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// close refuses new requests and waits for those in flight.
func (c *inFlight) close() {
	c.mu.Lock()
	c.closed = true
	if c.n == 0 {
		c.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	c.idle = idle
	c.mu.Unlock()
	<-idle
}

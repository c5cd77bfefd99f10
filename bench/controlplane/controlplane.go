// Package controlplane simulates a fleet of pylons in one process: each registers with
// every gateway and then heartbeats as a real pylon does, a full registration snapshot
// (PUT /control/v1/backends/{id} with the control token, the pylon's JSON body) once per
// period on its own keep-alive connection, its load numbers changing from one heartbeat to
// the next. The bench's control-plane command measures what that costs the gateway.
package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/wire"
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
	// Model is the one model every pylon serves.
	Model string
	// URL returns pylon i's advertised URL.
	URL func(i int) string
}

// Stats count what the pylons sent, per gateway.
type Stats struct {
	Sent     atomic.Int64
	Accepted atomic.Int64
	Failed   atomic.Int64
	// FirstErr is the first failure's text.
	FirstErr atomic.Pointer[string]
}

// Fleet is a running simulated fleet.
type Fleet struct {
	opts   Options
	stats  []*Stats
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start starts the fleet: pylon i's first registration goes out i/Pylons of a period after
// the start, so the heartbeats spread evenly over each period. Stop ends it.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	if opts.Pylons <= 0 || opts.Period <= 0 || len(opts.Admins) == 0 || opts.URL == nil {
		return nil, errors.New("controlplane: pylons > 0, a period, a URL function and at least one gateway are needed")
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Fleet{opts: opts, cancel: cancel}
	for _, admin := range opts.Admins {
		st := &Stats{}
		f.stats = append(f.stats, st)
		hc := &fasthttp.HostClient{
			Addr: admin, MaxConns: opts.Pylons, NoDefaultUserAgentHeader: true,
			ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxIdleConnDuration: 10 * opts.Period,
		}
		for i := range opts.Pylons {
			f.wg.Go(func() { f.pylon(ctx, hc, st, i) })
		}
	}
	return f, nil
}

// Stats returns each gateway's counts, in the order of Options.Admins.
func (f *Fleet) Stats() []*Stats { return f.stats }

// Stop stops every pylon and waits for them.
func (f *Fleet) Stop() {
	f.cancel()
	f.wg.Wait()
}

// pylon runs pylon i against one gateway until ctx ends.
func (f *Fleet) pylon(ctx context.Context, hc *fasthttp.HostClient, st *Stats, i int) {
	o := &f.opts
	id := "sim-" + strconv.Itoa(i)
	offset := o.Period * time.Duration(i) / time.Duration(o.Pylons)
	t := time.NewTimer(offset)
	defer t.Stop()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPut)
	req.SetRequestURI("http://" + hc.Addr + wire.RegistrationPath + id)
	req.Header.SetContentType("application/json")
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	reg := wire.Registration{
		ID: id, URL: o.URL(i), ClusterID: id, HeartbeatMs: uint64(o.Period.Milliseconds()), //nolint:gosec // a positive period
		Models: map[string]wire.Model{o.Model: {Status: "ACTIVE", Generation: 1}},
	}
	for n := uint64(0); ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(o.Period)
		// A pylon's numbers move between heartbeats: the gateway's update is real work.
		m := reg.Models[o.Model]
		m.Build = n + 1
		m.Stats = wire.Stats{
			LastMeanInputTPS: 5000 + float64((int(n%100)+i)%100), OutputTPS: 800 + float64(n%50), QueueSize: n % 4,
			QueuedInputSize: (n % 4) * 512, MaxOutputTPS: 2000, KVCacheCapacityTokens: 1 << 20,
			KVCacheUsedTokens: (n * 997) % (1 << 20), NumRunningQueries: n % 32, MaxEngineConcurrency: 64,
			TotalQueryInputSize: (n % 32) * 1024, InputProcessingQueries: n % 3, OutputGenerationQueries: n % 29,
			StatsObservedAtUnixMs: time.Now().UnixMilli(),
		}
		reg.Models[o.Model] = m
		body, err := json.Marshal(&reg)
		if err != nil {
			panic(err) // a fixed, valid structure
		}
		req.SetBody(body)
		st.Sent.Add(1)
		err = hc.Do(req, resp)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			st.fail(err.Error())
		case resp.StatusCode() != fasthttp.StatusOK:
			st.fail(fmt.Sprintf("status %d: %.200s", resp.StatusCode(), resp.Body()))
		default:
			st.Accepted.Add(1)
		}
	}
}

func (s *Stats) fail(msg string) {
	s.Failed.Add(1)
	s.FirstErr.CompareAndSwap(nil, &msg)
}

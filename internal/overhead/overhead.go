// Package overhead measures, side by side and with every component in its own process, the
// latency the pylon adds over calling the engine directly and the latency the gateway adds
// over calling the pylon directly, each next to a bare fasthttp reverse proxy on the same
// hop (both budgets are ≤ 1.25× the bare proxy's added latency, p50 and p99; see
// docs/bench.md). The client sends serial non-streaming requests over the seven paths, one
// of each per round in a new random order, so drift and bursts of load on a noisy machine
// hit every path alike and no path always follows the same one.
//
// The seventh path is an A/A control: a second bare proxy, the same code in its own
// process, on the gateway's hop. Its ratio to the first one would be 1.00× on a quiet
// machine; how far it strays in a run is the run's noise floor, the resolution at which
// that run can tell a component's ratio from the budget.
package overhead

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Paths of one measurement.
const (
	Engine       = iota // client → engine
	ProxyEngine         // client → bare proxy → engine
	PylonEngine         // client → pylon → engine
	Pylon               // client → pylon → engine (the gateway's baseline)
	ProxyPylon          // client → bare proxy → pylon → engine
	GatewayPylon        // client → gateway → pylon → engine
	ControlPylon        // client → a second, identical bare proxy → pylon → engine (A/A control)
	NumPaths
)

// PathNames label the paths in reports.
var PathNames = [NumPaths]string{"engine", "proxy→engine", "pylon→engine", "pylon", "proxy→pylon", "gateway→pylon", "proxy B→pylon"}

// Targets are the base addresses (host:port) of each path's first hop.
type Targets [NumPaths]string

// Result holds each path's latencies.
type Result struct {
	// Rounds holds each path's latencies in round order: Rounds[p][i] was measured in
	// round i, next to every other path's Rounds[·][i].
	Rounds [NumPaths][]time.Duration
	// Samples holds the same latencies sorted.
	Samples [NumPaths][]time.Duration
}

// NewResult returns the result of rounds (each path's latencies in round order; it keeps
// them, and sorted copies).
func NewResult(rounds [NumPaths][]time.Duration) *Result {
	r := &Result{Rounds: rounds}
	for p, s := range rounds {
		r.Samples[p] = slices.Clone(s)
		slices.Sort(r.Samples[p])
	}
	return r
}

// Quantile returns path's latency at q (0..1).
func (r *Result) Quantile(path int, q float64) time.Duration {
	s := r.Samples[path]
	if len(s) == 0 {
		return 0
	}
	return s[int(q*float64(len(s)-1))]
}

// Added is the latency a hop adds at q: the path through it minus its baseline.
func (r *Result) Added(path, baseline int, q float64) time.Duration {
	return r.Quantile(path, q) - r.Quantile(baseline, q)
}

// Ratio is the added latency of a component over that of the bare proxy on the same hop.
func (r *Result) Ratio(component, proxy, baseline int, q float64) float64 {
	return float64(r.Added(component, baseline, q)) / float64(r.Added(proxy, baseline, q))
}

// Measure sends warmup+requests rounds; each round sends one request on every path, in a
// new (seeded) random order. body is a non-streaming chat completion; model names
// the model (x-model) and input tokens are declared (x-input-tokens) so every hop accepts
// the same request.
func Measure(ctx context.Context, t Targets, model string, requests, warmup int) (*Result, error) {
	clients := make([]*fasthttp.HostClient, NumPaths)
	for i, a := range t {
		clients[i] = &fasthttp.HostClient{Addr: a, MaxConns: 1, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/v1/chat/completions")
	req.Header.SetContentType("application/json")
	req.Header.Set("x-model", model)
	req.Header.Set("x-input-tokens", "8")
	req.Header.Set("x-request-id", "overhead")
	req.SetBodyString(`{"model":"` + model + `","messages":[{"role":"user","content":"hello"}],"max_tokens":1}`)
	var rounds [NumPaths][]time.Duration
	rng := rand.New(rand.NewPCG(1, 2)) // seeded: an order, not a secret
	var order [NumPaths]int
	for p := range order {
		order[p] = p
	}
	for p := range rounds {
		rounds[p] = make([]time.Duration, 0, requests)
	}
	for k := range requests + warmup {
		if k%100 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		// A new random order every round: a path must not always follow the same path
		// (a process that has just answered keeps a CPU busy for a while winding down —
		// Go's sysmon polls every 20 µs for a millisecond after activity — which would tax
		// whichever path always comes next).
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, p := range order {
			req.SetHost(t[p])
			start := time.Now()
			err := clients[p].Do(req, resp)
			d := time.Since(start)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", PathNames[p], t[p], err)
			}
			if resp.StatusCode() != fasthttp.StatusOK {
				return nil, fmt.Errorf("%s (%s): status %d: %.200s", PathNames[p], t[p], resp.StatusCode(), resp.Body())
			}
			if k >= warmup {
				rounds[p] = append(rounds[p], d)
			}
		}
	}
	return NewResult(rounds), nil
}

// BareProxy returns the bare fasthttp reverse proxy handler forwarding to upstream: one
// HostClient.Do per request, nothing else (a non-streamed answer is read whole, the
// cheapest way; the gateway and the pylon do the same for non-streaming requests).
func BareProxy(upstream string) (fasthttp.RequestHandler, func()) {
	hc := &fasthttp.HostClient{Addr: upstream, MaxConns: 1024}
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Request.Header.Del("Connection")
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	}, hc.CloseIdleConnections
}

// Throughput sends small non-streaming requests to addr from concurrency keep-alive
// connections for d and returns the successful requests per second (any other answer is
// an error).
func Throughput(ctx context.Context, addr, model string, concurrency int, d time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: concurrency, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}],"max_tokens":1}`
	var total atomic.Int64
	errs := make(chan error, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetRequestURI("http://" + addr + "/v1/chat/completions")
			req.Header.SetContentType("application/json")
			req.Header.Set("x-model", model)
			req.Header.Set("x-input-tokens", "8")
			req.Header.Set("x-request-id", "throughput")
			req.SetBodyString(body)
			for ctx.Err() == nil {
				if err := hc.Do(req, resp); err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("%s: %w", addr, err)
					}
					return
				}
				if resp.StatusCode() != fasthttp.StatusOK {
					errs <- fmt.Errorf("%s: status %d: %.200s", addr, resp.StatusCode(), resp.Body())
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}

// Package drive sends a scenario's request manifest at an OpenAI-compatible endpoint (a
// bare engine, a pylon, the gateway or another router) over fasthttp, paced by the
// manifest's arrival offsets under max_concurrency, and records per request the status,
// TTFT (first SSE event with content), TTLT (last byte), serving backend and cluster, the
// mock engine's KV-cache headers and the gateway's retry count, as the reference bench's
// driver does.
package drive

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/bench/pace"
	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/score"
)

// Defaults.
const (
	DefaultPath           = "/v1/chat/completions"
	DefaultRequestTimeout = 5 * time.Minute
)

// Config configures one drive.
type Config struct {
	// Target is the endpoint's base URL, e.g. http://127.0.0.1:8000.
	Target string
	// Targets, when set, replace Target: request i goes to Targets[i mod len] (several
	// gateway replicas behind a client-side round-robin, like an L4 service).
	Targets []string
	// SpreadByAffinityKey sends a request with an affinity key to the target its key
	// hashes to (xxh3 mod len), as a load balancer hashing on x-cache-affinity-key in
	// front of the replicas does; requests without a key still go by index.
	SpreadByAffinityKey bool
	// Path is the request path (default /v1/chat/completions).
	Path string
	// MaxConcurrency caps requests in flight; an arrival that finds the cap reached is
	// sent as soon as a slot frees (its Sent time records the delay).
	MaxConcurrency int
	// RequestTimeout bounds each request from sending to its last byte (default 5 min).
	RequestTimeout time.Duration
	// TimeScale multiplies the manifest's arrival offsets (zero means 1).
	TimeScale float64
	// MaxBodyTokens caps the prompt's length in characters; x-input-tokens still carries
	// the manifest's count (0 = no cap: one "x" per input token, as the reference).
	MaxBodyTokens uint64
	// Plain sends requests as a plain OpenAI client does: no routing headers, the output
	// length as max_tokens, and prompt text that is each session's own (PlainBody).
	Plain bool
}

// Deps are the driver's injected dependencies; zero fields get defaults.
type Deps struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Before is called on the pacing goroutine just before request i is sent; the
	// runner uses it for degradation actions.
	Before func(i int)
	// Done is called after each request with its record and the number done so far. It
	// runs on request goroutines, concurrently.
	Done func(r *score.Record, done int)
}

// Result is one drive's outcome.
type Result struct {
	Records []score.Record
	// Length is the time from the first send to the last request's end.
	Length time.Duration
}

// sender performs one request; the HTTP implementation is httpSender.
type sender interface {
	send(ctx context.Context, r *scenario.Request, sent time.Time) score.Record
}

// Run drives m at cfg.Target and returns one record per request sent. When ctx ends it
// stops sending, aborts streams in flight and returns what it has with ctx's error.
func Run(ctx context.Context, cfg Config, m *scenario.Manifest, deps Deps) (Result, error) {
	targets := cfg.Targets
	if len(targets) == 0 {
		targets = []string{cfg.Target}
	}
	ms := multiSender{byKey: cfg.SpreadByAffinityKey}
	defer ms.close()
	var turns map[int][]uint64
	if cfg.Plain {
		turns = EarlierTurns(m)
	}
	for _, t := range targets {
		c := cfg
		c.Target = t
		s, err := newHTTPSender(c, m.Model)
		if err != nil {
			return Result{}, err
		}
		s.turns = turns
		ms.targets = append(ms.targets, s)
	}
	return run(ctx, cfg, m, deps, &ms)
}

func run(ctx context.Context, cfg Config, m *scenario.Manifest, deps Deps, s sender) (Result, error) {
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	conc := max(cfg.MaxConcurrency, 1)
	offsets := make([]time.Duration, len(m.Requests))
	for i := range m.Requests {
		offsets[i] = m.Requests[i].Arrival
	}
	p := pace.Schedule{Offsets: offsets, Scale: cfg.TimeScale}
	records := make([]score.Record, len(m.Requests))
	sem := make(chan struct{}, conc)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
		last time.Time
	)
	start := now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sentCount := 0
	var runErr error
loop:
	for hits := uint64(0); ; hits++ {
		wait, stop := p.Pace(now().Sub(start), hits)
		if stop {
			break
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				runErr = ctx.Err()
				break loop
			case <-timer.C:
			}
		}
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			break loop
		case sem <- struct{}{}:
		}
		i := int(hits)
		if deps.Before != nil {
			deps.Before(i)
		}
		sentCount++
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := now()
			rec := s.send(ctx, &m.Requests[i], sent)
			rec.Sent = sent.Sub(start)
			end := now()
			<-sem
			mu.Lock()
			records[i] = rec
			done++
			n := done
			if end.After(last) {
				last = end
			}
			mu.Unlock()
			if deps.Done != nil {
				deps.Done(&records[i], n)
			}
		}()
	}
	wg.Wait()
	res := Result{Records: records[:sentCount]}
	if !last.IsZero() {
		res.Length = last.Sub(start)
	}
	return res, runErr
}

// multiSender spreads requests over several targets: by index, or by affinity key.
type multiSender struct {
	targets []*httpSender
	byKey   bool
}

func (m *multiSender) send(ctx context.Context, r *scenario.Request, sent time.Time) score.Record {
	return m.targets[m.pick(r)].send(ctx, r, sent)
}

// pick is the index of r's target.
func (m *multiSender) pick(r *scenario.Request) int {
	n := len(m.targets)
	if m.byKey && r.AffinityKey != "" {
		return int(xxh3.HashString(r.AffinityKey) % uint64(n)) //nolint:gosec // n is a small positive count
	}
	return r.Index % n
}

func (m *multiSender) close() {
	for _, s := range m.targets {
		s.close()
	}
}

// ErrTarget is the class of bad --target values.
var ErrTarget = errors.New("invalid target")

// ParseTarget checks that target is an absolute http(s) base URL and returns its host
// (with port) and whether it uses TLS.
func ParseTarget(target string) (addr string, tls bool, err error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrTarget, err)
	}
	switch u.Scheme {
	case "http":
	case "https":
		tls = true
	default:
		return "", false, fmt.Errorf("%w: %q must start with http:// or https://", ErrTarget, target)
	}
	if u.Host == "" {
		return "", false, fmt.Errorf("%w: %q has no host", ErrTarget, target)
	}
	addr = u.Host
	if u.Port() == "" {
		addr += map[bool]string{false: ":80", true: ":443"}[tls]
	}
	return addr, tls, nil
}

// DefaultHostClient returns the client Run uses for addr: keep-alive connections enough
// for conc streams, waiting for a free connection rather than failing.
func defaultHostClient(addr string, tls bool, conc int) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                addr,
		IsTLS:               tls,
		MaxConns:            conc + 4,
		MaxConnWaitTimeout:  time.Minute,
		StreamResponseBody:  true,
		MaxIdleConnDuration: 4 * time.Second,
		ReadBufferSize:      16 << 10,
		Name:                "switchyard-bench",
	}
}

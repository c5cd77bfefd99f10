// Package simulate replays a scenario's manifest through the gateway's pure balancers
// against modelled engines, in virtual time: no processes, no sockets, no sleeping. A run
// of a few hundred requests takes milliseconds, so configurations can be swept (Grid).
//
// The model: one engine per cluster, the mock engine's legacy timing (a slot semaphore of
// max_concurrent_requests; prefill of the uncached input at prefill_tokens_per_s; the
// fixed TTFT; one token per 1/decode_tokens_per_s) and its LRU prefix cache keyed by the
// affinity key (kv_cache_capacity_tokens; the KV the running requests hold is the used
// part, cached prefixes are evictable); the load each balancer sees is the engines'
// state at the decision, as a pylon with a pinned input throughput would publish it; the
// routing loop is the gateway's (Wait decisions re-decided after at most 25 ms,
// Unavailable answered 503 unless capacity_wait_ms lets the request wait); clients keep
// at most max_concurrency requests in flight and send at the manifest's arrival times.
// Not modelled: network RTT (a fixed 1 ms), jitter, retries after a pylon's 429, several
// pylons per cluster, degradations, prefill_wait, capacity_wait_order (waiting requests
// retry in arrival order), TTFT correction, and the prompt hashes
// of plain clients (an algorithm with clients: plain is simulated without an affinity key
// and without prefix-aware routing).
package simulate

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/engines/kvcache"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Timing rules of the modelled gateway.
const (
	rtt      = time.Millisecond
	maxPark  = 25 * time.Millisecond
	waitCap  = 60 * time.Second
	epochSec = 1_700_000_000 // virtual clock origin (the session memory needs a non-zero time)
)

// Result is one algorithm's outcome.
type Result struct {
	Algorithm string
	// Requests answered 200 and failed (503 after routing).
	Served, Failed int
	// TTFT from the client's send to the first token, over served requests.
	TTFTMean, TTFTP50, TTFTP95 time.Duration
	// CacheHitRate is the share of served requests that reused a cached prefix.
	CacheHitRate float64
	// Makespan is the virtual time until the last request ended.
	Makespan time.Duration
}

// Run simulates scenario s under algorithm a.
func Run(s *scenario.Scenario, a *scenario.Algorithm) (Result, error) {
	doc, err := a.LBConfigJSON()
	if err != nil {
		return Result{}, fmt.Errorf("algorithm %s: %w", a.Name, err)
	}
	cfg, err := lbconfig.Parse(doc)
	if err != nil {
		return Result{}, fmt.Errorf("algorithm %s: %w", a.Name, err)
	}
	entry := cfg.ModelEntry(s.Model)
	bal, err := lb.New(entry, rand.New(rand.NewPCG(s.Seed, 0x51a)))
	if err != nil {
		return Result{}, fmt.Errorf("algorithm %s: %w", a.Name, err)
	}
	m := scenario.NewManifest(s, s.Seed)
	sim := newSim(s, entry, bal)
	sim.plain = a.Plain()
	sim.run(m.Requests)
	return sim.result(a.Name), nil
}

// request is one manifest request in flight.
type request struct {
	r        *scenario.Request
	sent     time.Duration // when the client sent it
	engine   *engine
	hit      bool
	firstTok time.Duration
}

// engine is one cluster's modelled engine.
type engine struct {
	id       string
	slots    uint64
	prefill  float64 // tokens/s
	ttft     time.Duration
	tokenGap time.Duration
	cache    *kvcache.Cache
	running  uint64     // requests holding a slot
	waiting  []*request // FIFO for a slot
	// prefilling counts the requests before their first token (queued ones included),
	// with their input tokens: the pylon's queue_size and queued_input_size.
	prefilling, queuedTokens uint64
	// held is the KV the running requests hold (prompt + output): the engine's used KV;
	// cached prefixes of finished requests are evictable and count as free.
	held uint64
}

func (e *engine) load() load.Load {
	st := e.cache.Stats()
	live := e.running + uint64(len(e.waiting))
	return load.Load{
		InputTPS: e.prefill, MaxInputTPS: e.prefill, QueueSize: e.prefilling, QueuedInputTokens: e.queuedTokens,
		RunningRequests: live, MaxEngineConcurrency: e.slots, TotalInputTokens: e.queuedTokens,
		KVCapacityTokens: st.CapacityTokens, KVUsedTokens: min(e.held, st.CapacityTokens), KVFreeTokens: st.CapacityTokens - min(e.held, st.CapacityTokens),
	}
}

// event kinds.
const (
	evArrive = iota
	evRoute
	evPrefilled
	evFirstToken
	evDone
)

type event struct {
	at   time.Duration
	seq  uint64
	kind int
	req  *request
}

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type sim struct {
	model    string
	plain    bool // the algorithm's clients send no affinity key (and no prefix hashes are modelled)
	entry    lbconfig.Entry
	bal      lb.Balancer
	engines  []*engine
	now      time.Duration
	q        events
	seq      uint64
	inflight int
	maxConc  int
	backlog  []*request
	ttfts    []time.Duration
	hits     int
	failed   int
	cands    []lb.Candidate
	snap     lb.Snapshot
}

func newSim(s *scenario.Scenario, entry lbconfig.Entry, bal lb.Balancer) *sim {
	sm := &sim{model: s.Model, entry: entry, bal: bal, maxConc: s.MaxConcurrency}
	if sm.maxConc <= 0 {
		sm.maxConc = 1 << 30
	}
	top := s.Topology()
	for i := range top.Clusters {
		c := &top.Clusters[i]
		p := c.Profile
		gap := time.Duration(0)
		if p.ServiceTimeMs.DecodeTokensPerS > 0 {
			gap = time.Duration(float64(time.Second) / p.ServiceTimeMs.DecodeTokensPerS)
		}
		sm.engines = append(sm.engines, &engine{
			id: c.ID, slots: uint64(max(p.MaxConcurrentRequests, 1)), prefill: p.ServiceTimeMs.PrefillTokensPerS,
			ttft: time.Duration(p.ServiceTimeMs.TTFTMean * float64(time.Millisecond)), tokenGap: gap,
			cache: kvcache.New(p.KVCacheCapacityTokens),
		})
	}
	slices.SortFunc(sm.engines, func(a, b *engine) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		default:
			return 0
		}
	})
	return sm
}

func (s *sim) at(t time.Duration, kind int, r *request) {
	s.seq++
	heap.Push(&s.q, event{at: t, seq: s.seq, kind: kind, req: r})
}

func (s *sim) run(reqs []scenario.Request) {
	for i := range reqs {
		s.at(reqs[i].Arrival, evArrive, &request{r: &reqs[i]})
	}
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(event)
		s.now = e.at
		switch e.kind {
		case evArrive:
			if s.inflight >= s.maxConc {
				s.backlog = append(s.backlog, e.req)
				continue
			}
			s.send(e.req)
		case evRoute:
			s.route(e.req)
		case evPrefilled:
			e.req.engine.cache.Commit(cacheKey(e.req.r), e.req.r.InputTokens)
		case evFirstToken:
			eng := e.req.engine
			eng.prefilling--
			eng.queuedTokens -= e.req.r.InputTokens
			e.req.firstTok = s.now
		case evDone:
			s.finish(e.req)
		}
	}
}

// send is the client sending r now.
func (s *sim) send(r *request) {
	s.inflight++
	r.sent = s.now
	s.route(r)
}

// route runs one routing attempt of r.
func (s *sim) route(r *request) {
	s.cands = s.cands[:0]
	for _, e := range s.engines {
		s.cands = append(s.cands, lb.Candidate{ClusterID: e.id, RTT: rtt, Load: e.load(), Backends: 1})
	}
	s.snap.Reset(r.r.RoutingKey, s.model, s.cands)
	elapsed := s.now - r.sent
	req := lb.Request{AffinityKey: r.r.AffinityKey, InputTokens: r.r.InputTokens, At: time.Unix(epochSec, 0).Add(s.now)}
	if s.plain {
		req.AffinityKey = ""
	}
	d := s.bal.Decide(&s.snap, &req, elapsed)
	switch d.Kind {
	case lb.KindSelected:
		s.dispatch(r, s.engines[d.Index])
	case lb.KindWait:
		if elapsed >= waitCap {
			s.fail(r)
			return
		}
		s.at(s.now+min(d.Wait, maxPark), evRoute, r)
	default:
		if d.Reason == lb.ReasonNoCapacity && elapsed < s.entry.CapacityWait {
			s.at(s.now+maxPark, evRoute, r)
			return
		}
		s.fail(r)
	}
}

func (s *sim) dispatch(r *request, e *engine) {
	r.engine = e
	e.prefilling++
	e.queuedTokens += r.r.InputTokens
	if e.running < e.slots {
		s.start(r)
		return
	}
	e.waiting = append(e.waiting, r)
}

// start gives r a slot of its engine now (the legacy timing).
func (s *sim) start(r *request) {
	e := r.engine
	e.running++
	e.held += r.r.InputTokens + r.r.OutputTokens
	acc := e.cache.Access(cacheKey(r.r), r.r.InputTokens)
	r.hit = acc.Hit
	prefill := time.Duration(0)
	if e.prefill > 0 && acc.Uncached > 0 {
		prefill = time.Duration(float64(acc.Uncached) / e.prefill * float64(time.Second))
	}
	t := s.now + rtt/2 + prefill
	s.at(t, evPrefilled, r)
	first := t + e.ttft
	s.at(first, evFirstToken, r)
	out := max(r.r.OutputTokens, 1)
	s.at(first+time.Duration(out-1)*e.tokenGap, evDone, r) //nolint:gosec // output lengths are small
}

func (s *sim) finish(r *request) {
	e := r.engine
	e.running--
	e.held -= r.r.InputTokens + r.r.OutputTokens
	if len(e.waiting) > 0 {
		next := e.waiting[0]
		e.waiting = e.waiting[1:]
		s.start(next)
	}
	s.ttfts = append(s.ttfts, r.firstTok+rtt/2-r.sent)
	if r.hit {
		s.hits++
	}
	s.done()
}

func (s *sim) fail(*request) {
	s.failed++
	s.done()
}

// done frees the client's slot for the next backlogged request.
func (s *sim) done() {
	s.inflight--
	if len(s.backlog) > 0 {
		next := s.backlog[0]
		s.backlog = s.backlog[1:]
		s.send(next)
	}
}

func (s *sim) result(name string) Result {
	res := Result{Algorithm: name, Served: len(s.ttfts), Failed: s.failed, Makespan: s.now}
	if len(s.ttfts) == 0 {
		return res
	}
	slices.Sort(s.ttfts)
	var sum time.Duration
	for _, t := range s.ttfts {
		sum += t
	}
	res.TTFTMean = sum / time.Duration(len(s.ttfts))
	res.TTFTP50 = s.ttfts[len(s.ttfts)/2]
	res.TTFTP95 = s.ttfts[min(len(s.ttfts)*95/100, len(s.ttfts)-1)]
	res.CacheHitRate = float64(s.hits) / float64(len(s.ttfts))
	return res
}

// cacheKey is the engine's prefix-cache key of r: its affinity key (one entry per key,
// as the mock engine keys x-cache-affinity-key), else the request itself.
func cacheKey(r *scenario.Request) uint64 {
	if r.AffinityKey != "" {
		return xxh3.HashString(r.AffinityKey)
	}
	return xxh3.HashString(r.ID)
}

package dispatch

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// A turn granted where the decision expects most of its prompt cached is tracked as a
// prompt in flight that is cached once its suffix is prefilled (its expected ready time),
// while the wait for it stays bounded by twice a full prefill: 1 100 tokens at 1 000
// tokens/s with 90 % cached is ready after 110 ms and waited for at most 2.2 s + slack.
// A first turn (nothing cached) is ready after its full prefill.
func TestTrackPrefillExpectsTheSuffix(t *testing.T) {
	e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
	cand := lb.Candidate{ClusterID: "a", Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 4}}
	now := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		cached float64
		ready  time.Duration
	}{{0.9, 110 * time.Millisecond}, {0, 1100 * time.Millisecond}} {
		s := &Scheduler{prefills: map[string]prefillState{}}
		p := &Pending{Entry: &e, Req: lb.Request{AffinityKey: "k", InputTokens: 1100}}
		var out Outcome
		s.trackPrefill(p, &cand, c.cached, &out, now)
		st, ok := s.prefills["k"]
		if !ok || out.PrefillToken == 0 {
			t.Fatalf("cached share %v: not tracked", c.cached)
		}
		if got := st.ready.Sub(now); got < c.ready-time.Millisecond || got > c.ready+time.Millisecond {
			t.Errorf("cached share %v: ready after %v, want %v", c.cached, got, c.ready)
		}
		if got, want := st.until.Sub(now), 2200*time.Millisecond+prefillSlack; got < want-time.Millisecond || got > want+time.Millisecond {
			t.Errorf("cached share %v: waited for until %v, want %v", c.cached, got, want)
		}
	}
}

// While its session's prompt is in flight, a request's balancer clock starts when that
// prompt is (expected) cached: before then it has waited for nothing but the cache.
func TestBalancerClockStartsWhenThePromptIsCached(t *testing.T) {
	e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
	t0 := time.Unix(1_700_000_000, 0)
	s := &Scheduler{prefills: map[string]prefillState{
		"k": {cluster: "a", token: 1, ready: t0.Add(2 * time.Second), until: t0.Add(5 * time.Second)},
	}}
	p := &Pending{Arrival: t0, Entry: &e, Req: lb.Request{AffinityKey: "k", InputTokens: 100}}
	for _, c := range []struct {
		at, elapsed, left time.Duration
	}{
		{500 * time.Millisecond, 0, 1500 * time.Millisecond},  // in flight: nothing counted yet
		{2500 * time.Millisecond, 500 * time.Millisecond, 0},  // expected cached at 2 s
		{3000 * time.Millisecond, 1000 * time.Millisecond, 0}, // counting from 2 s
	} {
		now := t0.Add(c.at)
		s.behindPrefill(p, now)
		if p.Req.Prefilling != "a" || p.Req.PrefillLeft != c.left {
			t.Errorf("at %v: priced behind %q for %v, want a for %v", c.at, p.Req.Prefilling, p.Req.PrefillLeft, c.left)
		}
		if got := p.decisionElapsed(now); got != c.elapsed {
			t.Errorf("at %v: balancer clock %v, want %v", c.at, got, c.elapsed)
		}
	}
	// Past the wait's bound the prompt no longer counts, and the clock keeps its start.
	now := t0.Add(6 * time.Second)
	s.behindPrefill(p, now)
	if p.Req.Prefilling != "" || p.decisionElapsed(now) != 4*time.Second {
		t.Errorf("past the bound: priced behind %q, clock %v; want none and 4 s", p.Req.Prefilling, p.decisionElapsed(now))
	}
	// A request that arrived after the prompt was cached counts from its arrival.
	late := &Pending{Arrival: t0.Add(3 * time.Second), Entry: &e, Req: lb.Request{AffinityKey: "k"}}
	now = t0.Add(3500 * time.Millisecond)
	s.behindPrefill(late, now)
	if got := late.decisionElapsed(now); got != 500*time.Millisecond {
		t.Errorf("late arrival: clock %v, want 500 ms from its arrival", got)
	}
}

// A turn the balancer sends away from the cluster prefilling its session's prompt waits
// for that prompt when the chosen cluster would prefill most of it again; it goes when the
// chosen cluster holds at least half of it, or when there is no prompt left to wait for
// (cached, past its bound, on a cluster it may not use or that is gone), or its own
// x-max-wait-ms has run out.
func TestStaysWithPrompt(t *testing.T) {
	e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
	t0 := time.Unix(1_700_000_000, 0)
	inFlight := prefillState{cluster: "a", token: 1, ready: t0.Add(2 * time.Second), until: t0.Add(5 * time.Second)}
	both := &lb.Snapshot{Candidates: []lb.Candidate{{ClusterID: "a"}, {ClusterID: "b"}}}
	toB := lb.Selected(1, 1)
	for _, c := range []struct {
		name  string
		st    prefillState
		snap  *lb.Snapshot
		d     lb.Decision
		at    time.Duration
		setup func(*Pending)
		stays bool
	}{
		{name: "in flight, chosen cluster holds none of it", st: inFlight, snap: both, d: toB, at: time.Second, stays: true},
		{name: "overdue but not cached, within the bound", st: inFlight, snap: both, d: toB, at: 3 * time.Second, stays: true},
		{name: "chosen cluster holds most of it", st: inFlight, snap: both, d: func() lb.Decision { d := toB; d.CachedShare = 0.6; return d }(), at: time.Second},
		{name: "chosen is the prompt's cluster", st: inFlight, snap: both, d: lb.Selected(0, 1), at: time.Second},
		{name: "prompt cached", st: func() prefillState { s := inFlight; s.cached = true; return s }(), snap: both, d: toB, at: time.Second},
		{name: "past the bound", st: inFlight, snap: both, d: toB, at: 6 * time.Second},
		{name: "prompt's cluster excluded", st: inFlight, snap: both, d: toB, at: time.Second, setup: func(p *Pending) { p.Req.Excluded = []string{"a"} }},
		{name: "prompt's cluster gone", st: inFlight, snap: &lb.Snapshot{Candidates: []lb.Candidate{{ClusterID: "c"}, {ClusterID: "b"}}}, d: toB, at: time.Second},
		{name: "own max wait over", st: inFlight, snap: both, d: toB, at: time.Second, setup: func(p *Pending) { p.HasMaxWait, p.MaxWait = true, 500*time.Millisecond }},
	} {
		s := &Scheduler{prefills: map[string]prefillState{"k": c.st}, deps: Deps{Observer: quietObserver{}}}
		p := &Pending{Arrival: t0, Entry: &e, Req: lb.Request{AffinityKey: "k", InputTokens: 100}}
		if c.setup != nil {
			c.setup(p)
		}
		if got := s.staysWithPrompt(p, c.snap, c.d, t0.Add(c.at)); got != c.stays || p.parked != c.stays {
			t.Errorf("%s: stays %v (parked %v), want %v", c.name, got, p.parked, c.stays)
		}
	}
}

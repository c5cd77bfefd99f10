package lb_test

import (
	"math"
	"testing"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// The configured comparator is honoured in every path.
func TestWAWConfiguredComparator(t *testing.T) {
	t.Parallel()
	// a has the better TTFT, b has fewer queued requests; both in the first bucket.
	a := idle("a", 1)
	a.Load.QueueSize = 10
	b := idle("b", 10)
	b.Load.QueueSize = 1
	s := snap(a, b)
	for name, mod := range map[string]func(*lbconfig.Entry){
		"no key":       nil,
		"ignore queue": func(e *lbconfig.Entry) { e.IgnoreQueueTime = true },
		"affinity":     func(e *lbconfig.Entry) { e.SelectionCount = 2 },
	} {
		e := waw(mod)
		e.Comparator = load.ComparatorNumRequestsQueued
		bal := newBalancer(t, e, seeded())
		if d := bal.Decide(s, &lb.Request{AffinityKey: "k"}, 0); d.Index != 1 {
			t.Errorf("%s: got %v, want b (fewer queued)", name, d)
		}
	}
}

// Lower TTFT wins; an excluded fast cluster is not selected; only the first TTFT bucket is
// open at elapsed 0; a non-finite TTFT loses to a finite one; full backends are filtered.
func TestWAWBasics(t *testing.T) {
	t.Parallel()
	b := newBalancer(t, waw(nil), seeded())
	expect(t, "lower TTFT", b.Decide(snap(idle("a", 50), idle("b", 5)), &lb.Request{}, 0), lb.Selected(1, 1))
	expect(t, "excluded fast", b.Decide(snap(idle("a", 50), idle("b", 5)), &lb.Request{Excluded: []string{"b"}}, ms(1000)), lb.Selected(0, 1))

	// Only the first bucket at elapsed 0: 5 and 20 unlocked, 50 locked.
	s := snap(idle("r5", 5), idle("r20", 20), idle("r50", 50))
	seen := map[int]bool{}
	for range 50 {
		d := b.Decide(s, &lb.Request{}, 0)
		seen[d.Index] = true
	}
	if seen[2] || !seen[0] {
		t.Errorf("first bucket: saw %v, want only indices 0 and 1", seen)
	}
	// n=1 makes the sample a uniform draw from the unlocked set: the 20 ms one must appear.
	n1 := newBalancer(t, waw(func(e *lbconfig.Entry) { e.N = 1 }), seeded())
	seen = map[int]bool{}
	for range 50 {
		seen[n1.Decide(s, &lb.Request{}, 0).Index] = true
	}
	if !seen[0] || !seen[1] || seen[2] {
		t.Errorf("n=1 over the first bucket: saw %v, want 0 and 1 only", seen)
	}

	inf := lb.Candidate{ClusterID: "inf", RTT: ms(1), Load: load.Load{InputTPS: 0}}
	expect(t, "non-finite loses", b.Decide(snap(inf, idle("ok", 500)), &lb.Request{InputTokens: 10}, 0), lb.Selected(1, 1))
	expect(t, "only non-finite", b.Decide(snap(inf), &lb.Request{InputTokens: 10}, ms(1e6)), lb.Unavailable(lb.ReasonNoFiniteTTFT))

	one := lb.Candidate{ClusterID: "one", RTT: ms(1), Load: load.Load{InputTPS: 1000, RunningRequests: 1, MaxEngineConcurrency: 1}}
	expect(t, "full filtered", b.Decide(snap(one, idle("b", 5)), &lb.Request{}, 0), lb.Selected(1, 1))
	expect(t, "only full", b.Decide(snap(one), &lb.Request{}, 0), lb.Unavailable(lb.ReasonNoCapacity))
}

// Prefill uses the input tokens; ignoring prefill flips the choice (the bucket values
// become the RTTs, 9 ms apart, beyond a 5 ms bucket).
func TestWAWPrefill(t *testing.T) {
	t.Parallel()
	fastProc := lb.Candidate{ClusterID: "a", RTT: ms(10), Load: load.Load{InputTPS: 200}}
	slowProc := lb.Candidate{ClusterID: "b", RTT: ms(1), Load: load.Load{InputTPS: 10}}
	s := snap(fastProc, slowProc)
	e := waw(func(e *lbconfig.Entry) { e.BucketSize = ms(5) })
	expect(t, "prefill counts", newBalancer(t, e, seeded()).Decide(s, &lb.Request{InputTokens: 100}, 0), lb.Selected(0, 1))
	e.IgnoreInputProcessingTime = true
	expect(t, "prefill ignored", newBalancer(t, e, seeded()).Decide(s, &lb.Request{InputTokens: 100}, 0), lb.Selected(1, 1))
}

// ignore_queue_time puts a low-RTT/high-queue cluster in the first bucket, the sampled
// comparison still uses the queue, and later prefill buckets stay locked.
func TestWAWIgnoreQueueTime(t *testing.T) {
	t.Parallel()
	queued := lb.Candidate{ClusterID: "queued", RTT: ms(1), Load: load.Load{InputTPS: 1000, QueueEstimates: []load.PriorityEstimate{prio(0, 1000)}}}
	calm := lb.Candidate{ClusterID: "calm", RTT: ms(10), Load: load.Load{InputTPS: 1000}}
	slow := lb.Candidate{ClusterID: "slow", RTT: ms(1), Load: load.Load{InputTPS: 10}}
	s := snap(queued, calm, slow)
	e := waw(func(e *lbconfig.Entry) { e.IgnoreQueueTime = true })
	b := newBalancer(t, e, seeded())
	expect(t, "comparison uses queue", b.Decide(s, &lb.Request{InputTokens: 10}, 0), lb.Selected(1, 1))
	expect(t, "queued cluster is in the first bucket", b.Decide(s, &lb.Request{InputTokens: 10, Excluded: []string{"calm"}}, 0), lb.Selected(0, 1))
	// slow: 1 + 1000 ms prefill, ~990 ms behind: its bucket needs ~248 ms of budget.
	n3 := newBalancer(t, waw(func(e *lbconfig.Entry) { e.IgnoreQueueTime, e.N = true, 3 }), seeded())
	for range 30 {
		if d := n3.Decide(s, &lb.Request{InputTokens: 10, Excluded: []string{"calm"}}, 0); d.Index != 0 {
			t.Fatalf("later prefill bucket must stay locked at 0: %v", d)
		}
	}
}

// After 20 ms with n=1 a full fast cluster is skipped and the slower one (RTT 60) unlocks
// (gap 40 × 0.25 = 10 ms of budget).
func TestWAWUnlockAfterElapsed(t *testing.T) {
	t.Parallel()
	s := snap(full(idle("fast", 20)), idle("slow", 60))
	b := newBalancer(t, waw(func(e *lbconfig.Entry) { e.N = 1 }), seeded())
	expect(t, "at 0", b.Decide(s, &lb.Request{}, 0), lb.Wait(ms(10)))
	expect(t, "at 20 ms", b.Decide(s, &lb.Request{}, ms(20)), lb.Selected(1, 1))
}

// The queue SLO filters candidates before bucketing (also with ignore_queue_time), and its
// limit is interpolated between floor and ceiling by the time spent within the request's
// SLO (no SLO: the ceiling).
func TestWAWQueueSLO(t *testing.T) {
	t.Parallel()
	slo := func(e *lbconfig.Entry) { e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, ms(100), ms(300) }
	q := func(id string, rtt float64, queue uint64) lb.Candidate {
		return lb.Candidate{ClusterID: id, RTT: ms(rtt), Load: load.Load{InputTPS: 1000, QueueEstimates: []load.PriorityEstimate{prio(0, queue)}}}
	}
	// The first-bucket cluster is over the SLO; the later-bucket one is under it.
	s := snap(q("over", 1, 350), q("under", 300, 0))
	for _, ignore := range []bool{false, true} {
		e := waw(slo)
		e.IgnoreQueueTime = ignore
		b := newBalancer(t, e, seeded())
		expect(t, "over-SLO first bucket loses", b.Decide(s, &lb.Request{}, 0), lb.Selected(1, 1))
		expect(t, "lone over-SLO", b.Decide(snap(q("over", 1, 350)), &lb.Request{}, 0), lb.Unavailable(lb.ReasonQueueLimit))
	}
	// Interpolation: floor 100, ceil 300, halfway through a 1000 ms SLO → 200 ms.
	b := newBalancer(t, waw(slo), seeded())
	half := &lb.Request{SLO: ms(1000)}
	expect(t, "199 under ≈200", b.Decide(snap(q("x", 1, 199)), half, ms(500)), lb.Selected(0, 1))
	expect(t, "201 over ≈200", b.Decide(snap(q("x", 1, 201)), half, ms(500)), lb.Unavailable(lb.ReasonQueueLimit))
	expect(t, "no SLO → ceiling", b.Decide(snap(q("x", 1, 299)), &lb.Request{}, 0), lb.Selected(0, 1))
	expect(t, "at arrival → floor", b.Decide(snap(q("x", 1, 101)), half, 0), lb.Unavailable(lb.ReasonQueueLimit))
	fixed := newBalancer(t, waw(func(e *lbconfig.Entry) { e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, ms(150), ms(150) }), seeded())
	expect(t, "equal floor and ceil", fixed.Decide(snap(q("x", 1, 151)), half, ms(900)), lb.Unavailable(lb.ReasonQueueLimit))
}

// Inside an unlocked bucket the lower queue wins; RTT-only mode still compares by queue and
// filters full backends first; later RTT buckets stay locked.
func TestWAWQueueInsideBucket(t *testing.T) {
	t.Parallel()
	q := func(id string, rtt float64, queue uint64) lb.Candidate {
		return lb.Candidate{ClusterID: id, RTT: ms(rtt), Load: load.Load{InputTPS: 1000, QueueEstimates: []load.PriorityEstimate{prio(0, queue)}}}
	}
	b := newBalancer(t, waw(func(e *lbconfig.Entry) { e.Comparator = load.ComparatorQueueTime }), seeded())
	expect(t, "lower queue", b.Decide(snap(q("a", 1, 10), q("b", 2, 5)), &lb.Request{}, 0), lb.Selected(1, 1))
	rttOnly := newBalancer(t, waw(func(e *lbconfig.Entry) {
		e.IgnoreQueueTime, e.IgnoreInputProcessingTime = true, true
	}), seeded())
	fullB := q("b", 2, 5)
	fullB.Load.MaxEngineConcurrency, fullB.Load.RunningRequests = 1, 1
	s := snap(q("a", 1, 10), q("b", 2, 5), q("far", 100, 0))
	expect(t, "RTT-only compares queue", rttOnly.Decide(s, &lb.Request{InputTokens: 100}, 0), lb.Selected(1, 1))
	expect(t, "RTT-only filters full", rttOnly.Decide(snap(q("a", 1, 10), fullB, q("far", 100, 0)), &lb.Request{InputTokens: 100}, 0), lb.Selected(0, 1))
}

// The estimate of the request's priority drives queue-time comparisons.
func TestWAWPriority(t *testing.T) {
	t.Parallel()
	a := lb.Candidate{ClusterID: "a", RTT: ms(1), Load: load.Load{InputTPS: 1000, QueueEstimates: []load.PriorityEstimate{prio(0, 5), prio(4, 500)}}}
	b := lb.Candidate{ClusterID: "b", RTT: ms(1), Load: load.Load{InputTPS: 1000, QueueEstimates: []load.PriorityEstimate{prio(0, 10), prio(4, 5)}}}
	bal := newBalancer(t, waw(func(e *lbconfig.Entry) { e.Comparator = load.ComparatorQueueTime; e.BucketSize = ms(1e6) }), seeded())
	expect(t, "priority 4", bal.Decide(snap(a, b), &lb.Request{Priority: 4}, 0), lb.Selected(1, 1))
	expect(t, "priority 0", bal.Decide(snap(a, b), &lb.Request{}, 0), lb.Selected(0, 1))
}

// The free-slot rule inside wait-and-widen, under a 100 ms queue SLO.
func TestWAWFreeSlot(t *testing.T) {
	t.Parallel()
	e := waw(func(e *lbconfig.Entry) { e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, ms(100), ms(100) })
	for _, tt := range []struct {
		running, maxConc uint64
		selectable       bool
	}{{24, 25, true}, {25, 25, false}, {26, 25, false}, {24, 0, false}} {
		for _, estimates := range [][]load.PriorityEstimate{nil, {prio(0, 10_000)}} {
			c := lb.Candidate{ClusterID: "c", RTT: ms(5), Load: load.Load{
				InputTPS: 8000, QueuedInputTokens: 80_000, RunningRequests: tt.running, MaxEngineConcurrency: tt.maxConc, QueueEstimates: estimates,
			}}
			d := newBalancer(t, e, seeded()).Decide(snap(c), &lb.Request{InputTokens: 8000}, 0)
			if got := d.Kind == lb.KindSelected; got != tt.selectable {
				t.Errorf("running %d/%d estimates %v: %v, want selectable %v", tt.running, tt.maxConc, estimates, d, tt.selectable)
			}
		}
	}
}

// Waiting for a later bucket with capacity: with the fast clusters full, Wait until the
// slow one's bucket unlocks, then select it; all full → Unavailable at any time; max_queued
// MaxUint64 admits a full cluster; a fast cluster with a free slot is always preferred over
// waiting.
func TestWAWWaitsForLaterBucket(t *testing.T) {
	t.Parallel()
	fast := lb.Candidate{ClusterID: "fast", RTT: 0, Load: load.Load{InputTPS: 20_000, RunningRequests: 4, MaxEngineConcurrency: 4}}
	fast2 := fast
	fast2.ClusterID = "fast2"
	slow := lb.Candidate{ClusterID: "slow", RTT: 0, Load: load.Load{InputTPS: 5000, MaxEngineConcurrency: 4}}
	r := &lb.Request{InputTokens: 4000}
	b := newBalancer(t, waw(nil), seeded())
	s := snap(fast, fast2, slow)
	expect(t, "t=0", b.Decide(s, r, 0), lb.Wait(ms(150)))
	expect(t, "t=149", b.Decide(s, r, ms(149)), lb.Wait(ms(1)))
	expect(t, "t=151", b.Decide(s, r, ms(151)), lb.Selected(2, 1))

	slowFull := slow
	slowFull.Load.RunningRequests = 4
	allFull := snap(fast, fast2, slowFull)
	for _, at := range []float64{0, 150, 10_000} {
		expect(t, "all full", b.Decide(allFull, r, ms(at)), lb.Unavailable(lb.ReasonNoCapacity))
	}

	mq := newBalancer(t, waw(func(e *lbconfig.Entry) { e.MaxQueued = math.MaxUint64 }), seeded())
	if d := mq.Decide(s, r, 0); d.Kind != lb.KindSelected || d.Index == 2 {
		t.Errorf("max_queued = MaxUint64 admits a full fast cluster: %v", d)
	}

	free := fast
	free.ClusterID, free.Load.RunningRequests = "free", 3
	for range 20 {
		expect(t, "fast with free capacity", b.Decide(snap(fast, free, slow), r, 0), lb.Selected(1, 1))
	}
}

// The selected candidate's TTFT estimate travels with the decision, so the gateway can
// compare it with the observed time to first byte.
func TestDecisionCarriesTTFTEstimate(t *testing.T) {
	t.Parallel()
	s := snap(idle("a", 50), idle("b", 5))
	for name, e := range map[string]lbconfig.Entry{"wait-and-widen": waw(nil), "power-of-n": lbconfig.DefaultEntry(lbconfig.PowerOfN)} {
		d := newBalancer(t, e, seeded()).Decide(s, &lb.Request{}, 0)
		if d.Kind != lb.KindSelected || d.TTFT != load.MillisOf(s.Candidates[d.Index].RTT) {
			t.Errorf("%s: got %v with TTFT %v, want the selected candidate's RTT as its estimate", name, d, d.TTFT)
		}
	}
}

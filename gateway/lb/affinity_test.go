package lb_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

func affinity(count int, hold float64, mod func(*lbconfig.Entry)) lbconfig.Entry {
	return waw(func(e *lbconfig.Entry) {
		e.SelectionCount, e.AffinityWait = count, ms(hold)
		if mod != nil {
			mod(e)
		}
	})
}

// One key always reaches the same primary, different keys spread over several primaries,
// and without a key affinity is skipped (the fastest wins).
func TestAffinityStickiness(t *testing.T) {
	t.Parallel()
	s := snap(idle("c0", 5), idle("c1", 5), idle("c2", 5), idle("c3", 5))
	b := newBalancer(t, affinity(1, 0, nil), seeded())
	first := b.Decide(s, &lb.Request{AffinityKey: "session-1"}, 0)
	for range 16 {
		expect(t, "same key", b.Decide(s, &lb.Request{AffinityKey: "session-1"}, 0), first)
	}
	primaries := map[int]bool{}
	for i := range 64 {
		primaries[b.Decide(s, &lb.Request{AffinityKey: fmt.Sprint("k", i)}, 0).Index] = true
	}
	if len(primaries) < 3 {
		t.Errorf("64 keys reached only %d primaries", len(primaries))
	}
	// Without a key (or a blank one) affinity is skipped: the fastest wins.
	fastest := snap(idle("c0", 50), idle("c1", 50), idle("c2", 1), idle("c3", 50))
	expect(t, "no key", b.Decide(fastest, &lb.Request{}, 0), lb.Selected(2, 1))
	expect(t, "blank key", b.Decide(fastest, &lb.Request{AffinityKey: "  "}, 0), lb.Selected(2, 1))
}

// Exclusions and full primaries with X = 0: a retry that excludes the primary goes to the
// global fastest with rank 2 while the group's membership stays the same, and the cached
// key bytes stay stable.
func TestAffinityRetryExclusion(t *testing.T) {
	t.Parallel()
	s := snap(idle("a", 10), idle("b", 10), idle("global-fast", 1))
	e := affinity(1, 0, nil)
	key := keyWithGroup(t, e, s, 0)
	b := newBalancer(t, e, seeded())
	expect(t, "primary", b.Decide(s, &lb.Request{AffinityKey: key}, 0), lb.Selected(0, 1))
	if got := lb.CachedKeyBytes(b); got != len(key) {
		t.Errorf("cached key bytes %d, want %d", got, len(key))
	}
	excl := &lb.Request{AffinityKey: key, Excluded: []string{"a"}}
	expect(t, "excluded primary", b.Decide(s, excl, 0), lb.Selected(2, 2))
	if diff := cmp.Diff([]int32{0}, lb.AffinityGroup(b, s, excl)); diff != "" {
		t.Errorf("membership changed by exclusion (-want +got):\n%s", diff)
	}
	expect(t, "several excluded", b.Decide(s, &lb.Request{AffinityKey: key, Excluded: []string{"a", "b"}}, 0), lb.Selected(2, 2))
	if got := lb.CachedKeyBytes(b); got != len(key) {
		t.Errorf("cached key bytes %d after repeats, want %d", got, len(key))
	}
	fullPrimary := snap(full(idle("a", 10)), idle("b", 10), idle("global-fast", 1))
	expect(t, "full primary", b.Decide(fullPrimary, &lb.Request{AffinityKey: key}, 0), lb.Selected(2, 2))
	expect(t, "all excluded fails at once", b.Decide(s, &lb.Request{AffinityKey: key, Excluded: []string{"a", "b", "global-fast"}}, 0), lb.Unavailable(lb.ReasonAllExcluded))
}

// A retry keeps the deadline measured from arrival.
func TestAffinityRetryKeepsDeadline(t *testing.T) {
	t.Parallel()
	s := snap(idle("a", 10), idle("global-fast", 1))
	e := affinity(1, 100, nil)
	key := keyWithGroup(t, e, s, 0)
	b := newBalancer(t, e, seeded())
	r := &lb.Request{AffinityKey: key, Excluded: []string{"a"}}
	expect(t, "99 ms", b.Decide(s, r, ms(99)), lb.Wait(ms(1)))
	expect(t, "100 ms", b.Decide(s, r, ms(100)), lb.Selected(1, 2))
}

// The group's backup wins with rank 1 when the primary is excluded, full, queued for 30 s
// or over the interpolated queue limit: selection stays inside the group.
func TestAffinityBackup(t *testing.T) {
	t.Parallel()
	s := snap(idle("primary", 10), idle("backup", 10), idle("public", 1))
	e := affinity(2, 0, nil)
	key := keyWithGroup(t, e, s, 0, 1)
	b := newBalancer(t, e, seeded())
	expect(t, "excluded primary", b.Decide(s, &lb.Request{AffinityKey: key, Excluded: []string{"primary"}}, 0), lb.Selected(1, 1))
	expect(t, "full primary", b.Decide(snap(full(idle("primary", 10)), idle("backup", 10), idle("public", 1)), &lb.Request{AffinityKey: key}, 0), lb.Selected(1, 1))

	queued := idle("primary", 10)
	queued.Load.MaxEngineConcurrency = 0
	queued.Load.QueueEstimates = []load.PriorityEstimate{prio(0, 30_000)}
	expect(t, "stays in the group", b.Decide(snap(queued, idle("backup", 10), idle("public", 1)), &lb.Request{AffinityKey: key}, 0), lb.Selected(1, 1))

	slo := affinity(2, 0, func(e *lbconfig.Entry) { e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, ms(100), ms(300) })
	over := idle("primary", 10)
	over.Load.MaxEngineConcurrency = 0
	over.Load.QueueEstimates = []load.PriorityEstimate{prio(0, 250)}
	bs := newBalancer(t, slo, seeded())
	expect(t, "primary over the interpolated limit", bs.Decide(snap(over, idle("backup", 10), idle("public", 1)), &lb.Request{AffinityKey: key, SLO: ms(1000)}, ms(500)), lb.Selected(1, 1))
}

// The affinity cache is invalidated when the candidate list changes; keys over 256 bytes
// are routed but not cached.
func TestAffinityCache(t *testing.T) {
	t.Parallel()
	b := newBalancer(t, affinity(1, 0, nil), seeded())
	b.Decide(snap(idle("a", 1), idle("b", 1)), &lb.Request{AffinityKey: "k"}, 0)
	expect(t, "new candidate list", b.Decide(snap(idle("z", 1)), &lb.Request{AffinityKey: "k"}, 0), lb.Selected(0, 1))
	long := strings.Repeat("x", 257)
	s := snap(idle("a", 1), idle("b", 1))
	first := b.Decide(s, &lb.Request{AffinityKey: long}, 0)
	if first.Kind != lb.KindSelected {
		t.Fatalf("long key not routed: %v", first)
	}
	before := lb.CachedKeyBytes(b)
	expect(t, "long key stable", b.Decide(s, &lb.Request{AffinityKey: long}, 0), first)
	if got := lb.CachedKeyBytes(b); got != before || got > 256 {
		t.Errorf("oversized key cached: %d bytes", got)
	}
}

// The ring point hash covers the routing key.
func TestRingPointHashInputs(t *testing.T) {
	t.Parallel()
	base := lb.RingPointHash("seed", "", "model-a", "c1", 0)
	for name, h := range map[string]uint64{
		"routing key":  lb.RingPointHash("seed", "rk", "model-a", "c1", 0),
		"seed":         lb.RingPointHash("other", "", "model-a", "c1", 0),
		"model":        lb.RingPointHash("seed", "", "model-b", "c1", 0),
		"cluster":      lb.RingPointHash("seed", "", "model-a", "c2", 0),
		"virtual node": lb.RingPointHash("seed", "", "model-a", "c1", 1),
	} {
		if h == base {
			t.Errorf("changing the %s did not change the hash", name)
		}
	}
	// The routing key changes which cluster a key lands on for some keys.
	e := affinity(1, 0, nil)
	b := newBalancer(t, e, seeded())
	cs := []lb.Candidate{idle("a", 1), idle("b", 1), idle("c", 1)}
	moved := 0
	for i := range 100 {
		r := &lb.Request{AffinityKey: fmt.Sprint("k", i)}
		x := lb.AffinityGroup(b, lb.NewSnapshot("", "m", cs), r)[0]
		y := lb.AffinityGroup(b, lb.NewSnapshot("tenant", "m", cs), r)[0]
		if x != y {
			moved++
		}
	}
	if moved == 0 {
		t.Error("the routing key does not influence the ring")
	}
}

// The X = 200 ms timeline with the utilization comparator.
func TestAffinityHoldTimeline(t *testing.T) {
	t.Parallel()
	affine := full(idle("affine", 100))
	p0 := idle("public-0", 300)
	p0.Load.RunningRequests = 1
	p1 := idle("public-1", 500)
	e := affinity(1, 200, func(e *lbconfig.Entry) { e.Comparator = load.ComparatorUtilization })
	s := snap(affine, p0, p1)
	key := keyWithGroup(t, e, s, 0)
	r := &lb.Request{AffinityKey: key}
	b := newBalancer(t, e, seeded())
	for _, step := range []struct {
		at   float64
		want lb.Decision
	}{
		{0, lb.Wait(ms(200))},
		{199, lb.Wait(ms(1))},
		{200, lb.Wait(ms(50))},
		{250, lb.Selected(1, 2)},
		{299, lb.Selected(1, 2)},
		{300, lb.Selected(2, 2)},
	} {
		expect(t, fmt.Sprintf("at %v ms", step.at), b.Decide(s, r, ms(step.at)), step.want)
	}
	p0full := snap(affine, full(p0), p1)
	expect(t, "public-0 full at 250", b.Decide(p0full, r, ms(250)), lb.Wait(ms(50)))
	expect(t, "public-0 full at 300", b.Decide(p0full, r, ms(300)), lb.Selected(2, 2))
	expect(t, "all full at 200", b.Decide(snap(affine, full(p0), full(p1)), r, ms(200)), lb.Unavailable(lb.ReasonNoCapacity))
	expect(t, "affine recovers", b.Decide(snap(idle("affine", 100), p0, p1), r, ms(50)), lb.Selected(0, 1))
}

// The global phase includes the affine members at full prefill.
func TestAffinityGlobalPhaseFullPrefill(t *testing.T) {
	t.Parallel()
	// primary: tps 7000 → 80 000 tokens discounted 1143 ms, full 11 429 ms (full engine).
	// backup: tps 14 000 + 2500 ms queue → discounted 3071 ms, full 8214 ms.
	primary := lb.Candidate{ClusterID: "primary", Load: load.Load{InputTPS: 7000, RunningRequests: 4, MaxEngineConcurrency: 4}}
	backup := lb.Candidate{ClusterID: "backup", Load: load.Load{InputTPS: 14_000, QueueEstimates: []load.PriorityEstimate{prio(0, 2500)}}}
	public := lb.Candidate{ClusterID: "public", Load: load.Load{InputTPS: 5000}}
	e := affinity(2, 200, func(e *lbconfig.Entry) { e.AffinityInputScale = 0.1 })
	s := snap(primary, backup, public)
	key := keyWithGroup(t, e, s, 0, 1)
	r := &lb.Request{AffinityKey: key, InputTokens: 80_000}
	b := newBalancer(t, e, seeded())
	expect(t, "199 ms", b.Decide(s, r, ms(199)), lb.Wait(ms(1)))
	expect(t, "200 ms: backup via the global phase", b.Decide(s, r, ms(200)), lb.Selected(1, 3))
	recovered := primary
	recovered.Load.RunningRequests = 0
	expect(t, "primary recovers at 201 ms", b.Decide(snap(recovered, backup, public), r, ms(201)), lb.Selected(0, 1))
}

// X is independent of the scale and of the request SLO.
func TestAffinityHoldIndependentOfScaleAndSLO(t *testing.T) {
	t.Parallel()
	s := snap(full(idle("primary", 10)), idle("public", 10))
	for _, scale := range []float64{0, 0.1, 1} {
		for _, slo := range []float64{0, 10, 60_000} {
			e := affinity(1, 100, func(e *lbconfig.Entry) { e.AffinityInputScale = scale })
			key := keyWithGroup(t, e, s, 0)
			b := newBalancer(t, e, seeded())
			r := &lb.Request{AffinityKey: key, InputTokens: 100, SLO: ms(slo)}
			expect(t, fmt.Sprintf("scale %v slo %v at 99", scale, slo), b.Decide(s, r, ms(99)), lb.Wait(ms(1)))
			expect(t, fmt.Sprintf("scale %v slo %v at 100", scale, slo), b.Decide(s, r, ms(100)), lb.Selected(1, 2))
		}
	}
}

// The discount applies only inside the group and survives the bucket flags.
func TestAffinityDiscount(t *testing.T) {
	t.Parallel()
	far := lb.Candidate{ClusterID: "far", RTT: ms(50), Load: load.Load{InputTPS: 10_000, MaxEngineConcurrency: 4}}
	near := lb.Candidate{ClusterID: "near", RTT: ms(1), Load: load.Load{InputTPS: 2000, MaxEngineConcurrency: 4}}
	public := lb.Candidate{ClusterID: "public", RTT: ms(20), Load: load.Load{InputTPS: 20_000, MaxEngineConcurrency: 4}}
	s := snap(far, near, public)
	r := func(key string) *lb.Request { return &lb.Request{AffinityKey: key, InputTokens: 1000} }
	one := affinity(2, 100, nil)
	key := keyWithGroup(t, one, s, 0, 1)
	expect(t, "scale 1: faster processor", newBalancer(t, one, seeded()).Decide(s, r(key), 0), lb.Selected(0, 1))
	for name, mod := range map[string]func(*lbconfig.Entry){
		"no flags":       nil,
		"ignore queue":   func(e *lbconfig.Entry) { e.IgnoreQueueTime = true },
		"ignore prefill": func(e *lbconfig.Entry) { e.IgnoreInputProcessingTime = true },
	} {
		e := affinity(2, 100, func(e *lbconfig.Entry) {
			e.AffinityInputScale = 0.1
			if mod != nil {
				mod(e)
			}
		})
		expect(t, "scale 0.1, "+name, newBalancer(t, e, seeded()).Decide(s, r(key), 0), lb.Selected(1, 1))
	}
	e := affinity(2, 100, func(e *lbconfig.Entry) { e.AffinityInputScale = 0.1 })
	allFull := snap(full(far), full(near), public)
	expect(t, "after X the undiscounted public processor", newBalancer(t, e, seeded()).Decide(allFull, r(key), ms(100)), lb.Selected(2, 3))
}

// The hold needs both a selection count and a key (otherwise the choice is immediate); a
// group covering every candidate waits until X, then is unavailable; no candidates →
// unavailable.
func TestAffinityHoldPreconditions(t *testing.T) {
	t.Parallel()
	s := snap(full(idle("a", 1)), idle("b", 1))
	noCount := newBalancer(t, affinity(0, 1000, nil), seeded())
	expect(t, "no selection count", noCount.Decide(s, &lb.Request{AffinityKey: "k"}, 0), lb.Selected(1, 1))
	withCount := newBalancer(t, affinity(1, 1000, nil), seeded())
	expect(t, "no key", withCount.Decide(s, &lb.Request{}, 0), lb.Selected(1, 1))

	allFull := snap(full(idle("a", 1)), full(idle("b", 1)))
	cover := newBalancer(t, affinity(2, 100, nil), seeded())
	expect(t, "group covers all, at 0", cover.Decide(allFull, &lb.Request{AffinityKey: "k"}, 0), lb.Wait(ms(100)))
	expect(t, "group covers all, at 100", cover.Decide(allFull, &lb.Request{AffinityKey: "k"}, ms(100)), lb.Unavailable(lb.ReasonNoCapacity))
	expect(t, "no candidates", cover.Decide(snap(), &lb.Request{AffinityKey: "k"}, 0), lb.Unavailable(lb.ReasonNoCandidates))
}

// The next-bucket wake-up is kept under the hold.
func TestAffinityNextBucketWakeUp(t *testing.T) {
	t.Parallel()
	// 100 tokens at 1000 tok/s: 110 ms (RTT 10, full) vs 150 ms (RTT 50); gap 40 → 10 ms.
	fullNear := lb.Candidate{ClusterID: "near", RTT: ms(10), Load: load.Load{InputTPS: 1000, RunningRequests: 2, MaxEngineConcurrency: 2}}
	avail := lb.Candidate{ClusterID: "avail", RTT: ms(50), Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 2}}
	s := snap(fullNear, avail)
	for _, tt := range []struct {
		hold     float64
		at0, at5 lb.Decision
	}{
		{200, lb.Wait(ms(10)), lb.Wait(ms(5))},
		{5, lb.Wait(ms(5)), lb.Wait(ms(5))},
	} {
		e := affinity(2, tt.hold, nil)
		key := keyWithGroup(t, e, s, 0, 1)
		b := newBalancer(t, e, seeded())
		r := &lb.Request{AffinityKey: key, InputTokens: 100}
		expect(t, fmt.Sprintf("hold %v at 0", tt.hold), b.Decide(s, r, 0), tt.at0)
		expect(t, fmt.Sprintf("hold %v at 5", tt.hold), b.Decide(s, r, ms(5)), tt.at5)
		expect(t, fmt.Sprintf("hold %v at 10", tt.hold), b.Decide(s, r, ms(10)), lb.Selected(1, 1))
	}
}

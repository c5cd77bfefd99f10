package lb_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Round-robin cycles over the candidates in snapshot order and never selects an excluded
// one.
func TestRoundRobinSequence(t *testing.T) {
	t.Parallel()
	s := snap(idle("a", 1), idle("b", 1), idle("c", 1))
	b := newBalancer(t, lbconfig.DefaultEntry(lbconfig.RoundRobin), firstRand{})
	var got []int
	for range 7 {
		got = append(got, b.Decide(s, &lb.Request{}, 0).Index)
	}
	if diff := cmp.Diff([]int{0, 1, 2, 0, 1, 2, 0}, got); diff != "" {
		t.Errorf("sequence (-want +got):\n%s", diff)
	}
	excl := newBalancer(t, lbconfig.DefaultEntry(lbconfig.RoundRobin), firstRand{})
	got = got[:0]
	for range 4 {
		got = append(got, excl.Decide(s, &lb.Request{Excluded: []string{"b"}}, 0).Index)
	}
	if diff := cmp.Diff([]int{0, 2, 0, 2}, got); diff != "" {
		t.Errorf("with b excluded (-want +got):\n%s", diff)
	}
	expect(t, "all excluded", b.Decide(s, &lb.Request{Excluded: []string{"a", "b", "c"}}, 0), lb.Unavailable(lb.ReasonAllExcluded))
	expect(t, "empty", b.Decide(snap(), &lb.Request{}, 0), lb.Unavailable(lb.ReasonNoCandidates))
}

// Two instances keep separate counters.
func TestRoundRobinInstancesIndependent(t *testing.T) {
	t.Parallel()
	s := snap(idle("a", 1), idle("b", 1))
	x := newBalancer(t, lbconfig.DefaultEntry(lbconfig.RoundRobin), firstRand{})
	y := newBalancer(t, lbconfig.DefaultEntry(lbconfig.RoundRobin), firstRand{})
	x.Decide(s, &lb.Request{}, 0)
	if got := y.Decide(s, &lb.Request{}, 0).Index; got != 0 {
		t.Errorf("second instance started at %d, want 0", got)
	}
}

// Random reaches every candidate and never an excluded one.
func TestRandom(t *testing.T) {
	t.Parallel()
	s := snap(idle("a", 1), idle("b", 1), idle("c", 1))
	b := newBalancer(t, lbconfig.DefaultEntry(lbconfig.Random), seeded())
	seen := map[int]int{}
	for range 30 {
		seen[b.Decide(s, &lb.Request{}, 0).Index]++
	}
	if len(seen) != 3 {
		t.Errorf("30 random decisions hit %v, want all 3", seen)
	}
	for range 50 {
		if d := b.Decide(s, &lb.Request{Excluded: []string{"a", "c"}}, 0); d.Index != 1 {
			t.Fatalf("excluded candidate selected: %v", d)
		}
	}
}

// Power-of-n with 2 candidates picks the preferred one under each comparator.
func TestPowerOfNComparators(t *testing.T) {
	t.Parallel()
	base := func(id string) lb.Candidate {
		return lb.Candidate{ClusterID: id, RTT: ms(10), Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 10}}
	}
	tests := []struct {
		comparator      load.Comparator
		better, worse   func(*lb.Candidate)
		priority        uint32
		wantIndexBetter int
	}{
		{load.ComparatorTTFT, func(c *lb.Candidate) { c.RTT = ms(1) }, func(c *lb.Candidate) { c.RTT = ms(100) }, 0, 0},
		{load.ComparatorQueueTime, func(c *lb.Candidate) {
			c.Load.MaxEngineConcurrency, c.Load.QueueEstimates = 0, []load.PriorityEstimate{prio(0, 1)}
		}, func(c *lb.Candidate) {
			c.Load.MaxEngineConcurrency, c.Load.QueueEstimates = 0, []load.PriorityEstimate{prio(0, 50)}
		}, 0, 0},
		{load.ComparatorInputWorkSeconds, func(c *lb.Candidate) { c.Load.InputTPS = 1000 }, func(c *lb.Candidate) { c.Load.InputTPS = 10 }, 0, 0},
		{load.ComparatorUtilization, func(c *lb.Candidate) { c.Load.RunningRequests = 1 }, func(c *lb.Candidate) { c.Load.RunningRequests = 9 }, 0, 0},
		{load.ComparatorNumRequestsQueued, func(c *lb.Candidate) { c.Load.QueueSize = 1 }, func(c *lb.Candidate) { c.Load.QueueSize = 10 }, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.comparator.String(), func(t *testing.T) {
			t.Parallel()
			e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
			e.Comparator = tt.comparator
			for _, order := range []bool{false, true} {
				a, b := base("a"), base("b")
				tt.better(&a)
				tt.worse(&b)
				want := 0
				if order {
					a, b, want = b, a, 1
				}
				bal := newBalancer(t, e, seeded())
				for range 20 {
					if d := bal.Decide(snap(a, b), &lb.Request{InputTokens: 100, Priority: tt.priority}, 0); d.Kind != lb.KindSelected || d.Index != want {
						t.Fatalf("order swapped %v: got %v, want index %d", order, d, want)
					}
				}
			}
		})
	}
}

// Power-of-n: 0 vs 1000 queued tokens at tps 1000 → always the empty one.
// Also: with more candidates than sample_count only sampled ones are compared, and ties
// are broken at random.
func TestPowerOfNSampling(t *testing.T) {
	t.Parallel()
	busy := lb.Candidate{ClusterID: "busy", RTT: ms(1), Load: load.Load{InputTPS: 1000, QueuedInputTokens: 1000}}
	free := lb.Candidate{ClusterID: "free", RTT: ms(1), Load: load.Load{InputTPS: 1000}}
	b := newBalancer(t, lbconfig.DefaultEntry(lbconfig.PowerOfN), seeded())
	for range 20 {
		if d := b.Decide(snap(busy, free), &lb.Request{InputTokens: 10}, 0); d.Index != 1 {
			t.Fatalf("got %v, want the idle backend", d)
		}
	}
	e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
	e.SampleCount = 1
	one := newBalancer(t, e, seeded())
	seen := map[int]bool{}
	for range 50 {
		seen[one.Decide(snap(busy, free), &lb.Request{InputTokens: 10}, 0).Index] = true
	}
	if len(seen) != 2 {
		t.Errorf("sample_count 1 must sometimes pick the worse candidate, saw %v", seen)
	}
	ties := snap(idle("a", 1), idle("b", 1), idle("c", 1))
	e.SampleCount = 3
	tb := newBalancer(t, e, seeded())
	seen = map[int]bool{}
	for range 60 {
		seen[tb.Decide(ties, &lb.Request{}, 0).Index] = true
	}
	if len(seen) != 3 {
		t.Errorf("ties must be broken uniformly, saw %v", seen)
	}
	expect(t, "excluded", b.Decide(snap(busy, free), &lb.Request{Excluded: []string{"free"}}, 0), lb.Selected(0, 1))
}

// Input-work admission: pooled work seconds over the non-excluded clusters, decode-only
// input ignored, pulsar counting low-KV clusters unless KV is considered, and the limit
// (work at the limit is admitted).
func TestInputWorkAdmission(t *testing.T) {
	t.Parallel()
	a := lb.Candidate{ClusterID: "a", Load: load.Load{InputTPS: 100, QueuedInputTokens: 300, TotalInputTokens: 9999}}
	b := lb.Candidate{ClusterID: "b", Load: load.Load{InputTPS: 50, QueuedInputTokens: 120}}
	bad := lb.Candidate{ClusterID: "bad", Load: load.Load{InputTPS: math.NaN(), QueuedInputTokens: 0}}
	e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
	sec, ok := lb.InputWorkSeconds(snap(a, b), &lb.Request{InputTokens: 30}, e)
	if !ok || math.Abs(sec-3.0) > 1e-12 {
		t.Errorf("pool work = %v (%v), want 3.0 s", sec, ok)
	}
	if _, ok := lb.InputWorkSeconds(snap(a, bad), &lb.Request{InputTokens: 30, Excluded: []string{"a"}}, e); ok {
		t.Error("only an excluded and an invalid-tps cluster: capacity must be unavailable")
	}
	decodeOnly := lb.Candidate{ClusterID: "d", Load: load.Load{InputTPS: 100, TotalInputTokens: 100_000}}
	if sec, _ := lb.InputWorkSeconds(snap(decodeOnly), &lb.Request{InputTokens: 50}, e); sec != 0.5 {
		t.Errorf("total_query_input_size must be ignored: %v s, want 0.5", sec)
	}
	// Pulsar: a low-KV cluster counts unless KV is considered.
	big := lb.Candidate{ClusterID: "big", Load: load.Load{InputTPS: 1000, QueuedInputTokens: 1000, KVCapacityTokens: 100, KVFreeTokens: 10}}
	small := lb.Candidate{ClusterID: "small", Load: load.Load{InputTPS: 100, QueuedInputTokens: 100, KVCapacityTokens: 1000, KVFreeTokens: 1000}}
	p := lbconfig.DefaultEntry(lbconfig.Pulsar)
	if sec, _ := lb.InputWorkSeconds(snap(big, small), &lb.Request{InputTokens: 50}, p); math.Abs(sec-1150.0/1100) > 1e-12 {
		t.Errorf("pulsar without KV: %v, want 1150/1100", sec)
	}
	p.ConsiderKVFreeTokens = true
	if sec, _ := lb.InputWorkSeconds(snap(big, small), &lb.Request{InputTokens: 50}, p); sec != 1.5 {
		t.Errorf("pulsar with KV: %v, want 1.5 s", sec)
	}

	limited := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
	limited.HasMaxInputWork, limited.MaxInputWorkSeconds = true, 0.5
	one := lb.Candidate{ClusterID: "one", Load: load.Load{InputTPS: 100, QueuedInputTokens: 100}}
	if got := lb.Admit(snap(one), &lb.Request{InputTokens: 50}, limited); got != lb.InputWorkLimitExceeded {
		t.Errorf("1.5 s of work over a 0.5 s limit: %v", got)
	}
	if got := lb.Admit(snap(one), &lb.Request{InputTokens: 50}, lbconfig.DefaultEntry(lbconfig.WaitAndWiden)); got != lb.Admitted {
		t.Errorf("no limit: %v", got)
	}
	if got := lb.Admit(snap(bad), &lb.Request{InputTokens: 50}, limited); got != lb.InputWorkCapacityUnavailable {
		t.Errorf("no throughput: %v", got)
	}
	limited.MaxInputWorkSeconds = 1
	if got := lb.Admit(snap(one), &lb.Request{InputTokens: 0}, limited); got != lb.Admitted {
		t.Errorf("1 s of work at a 1 s limit must be admitted, got %v", got)
	}
}

// Cluster aggregation: backend-local load summed over active backends, cluster-scoped
// fields from the source backend, RTT the floored mean, inactive backends left out, and a
// request's own prefill rate the mean of the valid input throughputs.
func TestAggregate(t *testing.T) {
	t.Parallel()
	x := lb.Backend{ID: "x", RTT: 3, Active: true, Load: load.Load{
		InputTPS: 100, OutputTPS: 10, QueueSize: 2, QueuedInputTokens: 130, InputProcessingRequests: 1, OutputGenerationRequests: 4,
		RunningRequests: 6, MaxEngineConcurrency: 8, KVFreeTokens: 5, ObservedAtUnixMilli: 100, Capabilities: []string{"b", "a"}, Sources: []string{"s1"},
	}}
	y := lb.Backend{ID: "y", RTT: 4, Active: true, Load: load.Load{
		InputTPS: 100, OutputTPS: 20, QueueSize: 3, QueuedInputTokens: 130, InputProcessingRequests: 2, OutputGenerationRequests: 1,
		RunningRequests: 7, MaxEngineConcurrency: 9, KVFreeTokens: 6, ObservedAtUnixMilli: 200, MaxOutputTPS: 50,
		QueueEstimates: []load.PriorityEstimate{prio(0, 7)}, Capabilities: []string{"c", "a"},
	}}
	z := lb.Backend{ID: "z", RTT: 1000, Active: false, Load: load.Load{InputTPS: 1e9, QueueSize: 1000}}
	nan := lb.Backend{ID: "n", RTT: 5, Active: true, Load: load.Load{InputTPS: math.NaN()}}
	got, ok := lb.Aggregate("c1", []lb.Backend{x, y, z, nan}, 1)
	if !ok {
		t.Fatal("no candidate")
	}
	want := lb.Candidate{ClusterID: "c1", RTT: 4, Backends: 3, Load: load.Load{
		InputTPS: 200, OutputTPS: 30, QueueSize: 5, QueuedInputTokens: 260, InputProcessingRequests: 3, OutputGenerationRequests: 5,
		RunningRequests: 7, MaxEngineConcurrency: 9, KVFreeTokens: 6, ObservedAtUnixMilli: 200, MaxOutputTPS: 50,
		QueueEstimates: []load.PriorityEstimate{prio(0, 7)}, Capabilities: []string{"a", "b", "c"}, Sources: []string{"s1"},
		RequestInputTPS: 100, // one request is prefilled by one backend: the mean of the valid rates
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Aggregate (-want +got):\n%s", diff)
	}
	if _, ok := lb.Aggregate("c2", []lb.Backend{z}, 0); ok {
		t.Error("a cluster without active backends must not be a candidate")
	}
	if got, _ := lb.Aggregate("c3", []lb.Backend{z, x}, 0); got.Load.MaxEngineConcurrency != 8 {
		t.Errorf("an inactive source falls back to an active backend: %+v", got.Load)
	}
	mean, _ := lb.Aggregate("c4", []lb.Backend{{RTT: 1, Active: true}, {RTT: 2, Active: true}}, 0)
	if mean.RTT != time.Duration(1) {
		t.Errorf("mean RTT floors to whole nanoseconds: %v", mean.RTT)
	}
}

// Capabilities and sources: a one-backend cluster's sorted lists join the candidate
// without a copy (a load report refreshes the candidate on every response), a second
// backend's entries never write into the first one's list, and an unsorted list is sorted.
func TestAggregateCapabilitiesAllocatesNothing(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	caps := make([]string, 2, 8) // spare capacity: an insert in place would overwrite it
	copy(caps, []string{"a", "c"})
	x := lb.Backend{ID: "x", Active: true, Load: load.Load{Capabilities: caps, Sources: []string{"s1", "s2"}}}
	one := []lb.Backend{x}
	if n := testing.AllocsPerRun(100, func() { lb.Aggregate("c", one, 0) }); n != 0 {
		t.Errorf("one backend: %v allocations per aggregation, want 0", n)
	}
	y := lb.Backend{ID: "y", Active: true, Load: load.Load{Capabilities: []string{"b"}, Sources: []string{"s2", "s1"}}}
	got, _ := lb.Aggregate("c", []lb.Backend{x, y}, 0)
	if diff := cmp.Diff([]string{"a", "b", "c"}, got.Load.Capabilities); diff != "" {
		t.Errorf("capabilities (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "c", ""}, caps[:3]); diff != "" {
		t.Errorf("the first backend's list was written into (-want +got):\n%s", diff)
	}
	got, _ = lb.Aggregate("c", []lb.Backend{y}, 0)
	if diff := cmp.Diff([]string{"s1", "s2"}, got.Load.Sources); diff != "" {
		t.Errorf("unsorted sources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"s2", "s1"}, y.Load.Sources); diff != "" {
		t.Errorf("sorting wrote into the backend's list (-want +got):\n%s", diff)
	}
}

// A shared cluster 2×(tps 100, queued 130) = 1.3 s loses to a single cluster at 1.2 s, and
// wins once it drains.
func TestAggregatedClusterCompetes(t *testing.T) {
	t.Parallel()
	shared, _ := lb.Aggregate("shared", []lb.Backend{
		{ID: "s1", Active: true, Load: load.Load{InputTPS: 100, QueuedInputTokens: 130}},
		{ID: "s2", Active: true, Load: load.Load{InputTPS: 100, QueuedInputTokens: 130}},
	}, 0)
	single := lb.Candidate{ClusterID: "single", Load: load.Load{InputTPS: 100, QueuedInputTokens: 120}}
	b := newBalancer(t, lbconfig.DefaultEntry(lbconfig.PowerOfN), seeded())
	if d := b.Decide(snap(shared, single), &lb.Request{}, 0); d.Index != 1 {
		t.Errorf("1.3 s vs 1.2 s: got %v, want the single cluster", d)
	}
	shared.Load.QueuedInputTokens = 0
	if d := b.Decide(snap(shared, single), &lb.Request{}, 0); d.Index != 0 {
		t.Errorf("drained shared cluster: got %v", d)
	}
}

// A request is prefilled by one backend of its cluster: a two-backend cluster of 1000
// tokens/s each prefills 500 tokens in 500 ms, not in the 250 ms its summed rate would
// say, and loses to a one-backend cluster of 1500 tokens/s (333 ms).
func TestClusterRequestPrefillAtOneBackendsRate(t *testing.T) {
	t.Parallel()
	pair, _ := lb.Aggregate("pair", []lb.Backend{
		{ID: "p1", Active: true, Load: load.Load{InputTPS: 1000}},
		{ID: "p2", Active: true, Load: load.Load{InputTPS: 1000}},
	}, 0)
	single := lb.Candidate{ClusterID: "single", Load: load.Load{InputTPS: 1500}}
	r := &lb.Request{InputTokens: 500}
	if got := pair.Estimate(r, 1, load.Ignore{}).Prefill; got != 500 {
		t.Errorf("pair prefill %v ms, want 500", got)
	}
	b := newBalancer(t, lbconfig.DefaultEntry(lbconfig.PowerOfN), seeded())
	if d := b.Decide(snap(pair, single), r, 0); d.Index != 1 {
		t.Errorf("got %v, want the single faster backend", d)
	}
}

func TestNewRejectsBadEntries(t *testing.T) {
	t.Parallel()
	e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
	e.SampleCount = 0
	if _, err := lb.New(e, seeded()); err == nil {
		t.Error("sample_count 0 accepted")
	}
	w := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
	w.AffinityInputScale = math.NaN()
	if _, err := lb.New(w, seeded()); err == nil {
		t.Error("NaN scale accepted")
	}
	if _, err := lb.New(lbconfig.DefaultEntry(lbconfig.Random), nil); err == nil {
		t.Error("nil Rand accepted")
	}
}

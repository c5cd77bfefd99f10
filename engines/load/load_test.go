package load_test

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/load"
)

func TestWorkTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		work, tps float64
		want      load.Millis
	}{
		{"no work is free even without throughput", 0, 0, 0},
		{"work on zero tps never completes", 10, 0, load.Infinite},
		{"work on negative tps never completes", 10, -1, load.Infinite},
		{"work on NaN tps never completes", 10, math.NaN(), load.Infinite},
		{"work on infinite tps never completes", 10, math.Inf(1), load.Infinite},
		{"work over rate", 500, 1000, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := load.WorkTime(tt.work, tt.tps); got != tt.want {
				t.Errorf("WorkTime(%v, %v) = %v, want %v", tt.work, tt.tps, got, tt.want)
			}
		})
	}
}

// The free-slot rule: a known concurrency limit above the running count gives zero queue
// delay, whatever the priority estimates say; a full or unknown limit does not.
// Full and HasFreeSlot: a known limit is either full or has a free slot; an unknown one
// is neither.
func TestFullOrFreeSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		running, limit uint64
		full, free     bool
	}{{24, 25, false, true}, {25, 25, true, false}, {26, 25, true, false}, {24, 0, false, false}, {0, 0, false, false}} {
		l := load.Load{RunningRequests: tc.running, MaxEngineConcurrency: tc.limit}
		if l.Full() != tc.full || l.HasFreeSlot() != tc.free || load.SlotsTaken(tc.running, tc.limit) != tc.full {
			t.Errorf("%d of %d running: Full %v, HasFreeSlot %v; want %v, %v", tc.running, tc.limit, l.Full(), l.HasFreeSlot(), tc.full, tc.free)
		}
	}
}

func TestFreeSlotRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		running, maxConc uint64
		estimates        []load.PriorityEstimate
		wantQueue        load.Millis
		wantTTFT         load.Millis
	}{
		{"free slot", 24, 25, nil, 0, 1005},
		{"free slot beats a priority estimate", 24, 25, []load.PriorityEstimate{{0, 10_000}}, 0, 1005},
		{"last slot taken", 25, 25, nil, 10_000, 11_005},
		{"over the limit", 26, 25, nil, 10_000, 11_005},
		{"unknown limit", 24, 0, nil, 10_000, 11_005},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := load.Load{InputTPS: 8000, QueuedInputTokens: 80_000, RunningRequests: tt.running, MaxEngineConcurrency: tt.maxConc, QueueEstimates: tt.estimates}
			est := l.Estimate(5, 8000, 0, 1, load.Ignore{})
			if est.Queue != tt.wantQueue || est.TTFT != tt.wantTTFT || est.Comparator != tt.wantTTFT {
				t.Errorf("Estimate = %+v, want queue %v, TTFT %v", est, tt.wantQueue, tt.wantTTFT)
			}
			if raw, _ := l.QueueEstimate(0); len(tt.estimates) == 0 && raw != 10_000 {
				t.Errorf("raw estimate changed by the free-slot rule: %v", raw)
			}
		})
	}
}

// Filling the last slot with a reservation restores the normal estimate.
func TestReservationFillsLastSlot(t *testing.T) {
	t.Parallel()
	l := load.Load{InputTPS: 8000, QueuedInputTokens: 80_000, RunningRequests: 24, MaxEngineConcurrency: 25}
	if q := l.EffectiveQueue(0); q != 0 {
		t.Fatalf("before: queue %v, want 0", q)
	}
	r := l.Reserve(8000, 0)
	if q := r.EffectiveQueue(0); q != 11_000 {
		t.Errorf("after reserving the last slot: queue %v, want 11000 (88 000 tokens at 8000/s)", q)
	}
	if l.RunningRequests != 24 {
		t.Errorf("Reserve modified its receiver")
	}
}

// The TTFT components: RTT + queue + prefill, the prefill scaled, queue or prefill left out
// of the TTFT on request while the comparator value keeps them.
func TestEstimateComponents(t *testing.T) {
	t.Parallel()
	l := load.Load{InputTPS: 100, QueueEstimates: []load.PriorityEstimate{{4, 25}}}
	tests := []struct {
		name     string
		scale    float64
		ignore   load.Ignore
		wantTTFT load.Millis
		wantCmp  load.Millis
	}{
		{"full", 1, load.Ignore{}, 2032, 2032},
		{"scale 0.1", 0.1, load.Ignore{}, 232, 232},
		{"ignore queue", 1, load.Ignore{Queue: true}, 2007, 2032},
		{"ignore prefill", 1, load.Ignore{Prefill: true}, 32, 2032},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			est := l.Estimate(7, 200, 4, tt.scale, tt.ignore)
			if !approx(est.TTFT, tt.wantTTFT) || !approx(est.Comparator, tt.wantCmp) || est.Queue != 25 {
				t.Errorf("Estimate = %+v, want TTFT %v comparator %v queue 25", est, tt.wantTTFT, tt.wantCmp)
			}
		})
	}
}

func approx(a, b load.Millis) bool { return math.Abs(float64(a-b)) < 1e-9 }

// A request's queue estimate is the one of the nearest published priority at or below its own.
func TestQueueEstimatePriority(t *testing.T) {
	t.Parallel()
	l := load.Load{InputTPS: 100, QueuedInputTokens: 100_000, QueueEstimates: []load.PriorityEstimate{{2, 20}, {4, 40}}}
	for _, tt := range []struct {
		priority uint32
		want     load.Millis
	}{{4, 40}, {10, 40}, {3, 20}, {2, 20}, {0, 0}, {1, 0}} {
		if got, ok := l.QueueEstimate(tt.priority); !ok || got != tt.want {
			t.Errorf("priority %d: got %v (known %v), want %v", tt.priority, got, ok, tt.want)
		}
	}
	only4 := load.Load{QueueEstimates: []load.PriorityEstimate{{4, 40}}}
	if got := only4.EffectiveQueue(0); got != 0 {
		t.Errorf("priority 0 with only a priority-4 entry: %v, want 0", got)
	}
	empty := load.Load{InputTPS: 1000, QueuedInputTokens: 1001}
	if got, _ := empty.QueueEstimate(7); got != 1001 {
		t.Errorf("empty map: %v, want ceil(1001/1000*1000)=1001", got)
	}
	unknown := load.Load{QueuedInputTokens: 1}
	if _, ok := unknown.QueueEstimate(0); ok {
		t.Error("backlog on invalid tps must be unknown")
	}
	if got := unknown.EffectiveQueue(0); got != load.Infinite {
		t.Errorf("unknown estimate falls back to work time: %v, want +Inf", got)
	}
	if got := (&load.Load{}).EffectiveQueue(0); got != 0 {
		t.Errorf("no backlog and no tps: %v, want 0", got)
	}
}

// The prefill scale never rescues an engine without throughput: scale 0 still gives +Inf.
func TestPrefillScaleAndInvalidTPS(t *testing.T) {
	t.Parallel()
	for _, tps := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		l := load.Load{InputTPS: tps}
		if got := l.Estimate(5, 100, 0, 0, load.Ignore{}).TTFT; got != load.Infinite {
			t.Errorf("tps %v scale 0: TTFT %v, want +Inf", tps, got)
		}
	}
	l := load.Load{InputTPS: 1000}
	if got := l.Estimate(5, 100, 0, 0, load.Ignore{}).TTFT; got != 5 {
		t.Errorf("valid tps scale 0: TTFT %v, want RTT 5", got)
	}
}

// A cluster's request prefill runs at one backend's rate (RequestInputTPS) while its queue
// drains at the summed rate (InputTPS).
func TestPrefillAtTheRequestRate(t *testing.T) {
	t.Parallel()
	l := load.Load{InputTPS: 2000, RequestInputTPS: 1000, QueuedInputTokens: 2000}
	e := l.Estimate(5, 500, 0, 1, load.Ignore{})
	if e.Prefill != 500 || e.Queue != 1000 || e.TTFT != 1505 {
		t.Errorf("estimate %+v, want prefill 500 ms (500 tokens at 1000/s), queue 1000 ms (2000 at 2000/s), TTFT 1505", e)
	}
	for _, bad := range []float64{math.NaN(), -1, math.Inf(1)} {
		l.RequestInputTPS = bad
		if got := l.Prefill(500, 1); got != 250 {
			t.Errorf("request rate %v: prefill %v, want 250 ms at the cluster's rate", bad, got)
		}
	}
	if got := (&load.Load{RequestInputTPS: 1000}).Prefill(500, 1); got != load.Infinite {
		t.Errorf("no cluster throughput: prefill %v, want +Inf whatever the request rate", got)
	}
}

// A reservation adds its prefill time to the entry of its priority (created from the nearest
// entry at or below it) and to every less urgent one; an invalid throughput clears the map.
func TestReservePriorityMap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       []load.PriorityEstimate
		priority uint32
		want     []load.PriorityEstimate
	}{
		{"insert after the nearest lower entry", []load.PriorityEstimate{{2, 5}}, 3, []load.PriorityEstimate{{2, 5}, {3, 105}}},
		{"insert between and add to less urgent", []load.PriorityEstimate{{1, 10}, {4, 40}}, 2, []load.PriorityEstimate{{1, 10}, {2, 110}, {4, 140}}},
		{"existing entry", []load.PriorityEstimate{{1, 10}, {4, 40}}, 4, []load.PriorityEstimate{{1, 10}, {4, 140}}},
		{"no entry at or below starts at zero", []load.PriorityEstimate{{4, 40}}, 0, []load.PriorityEstimate{{0, 100}, {4, 140}}},
		{"empty map stays empty", nil, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := load.Load{InputTPS: 1000, QueueEstimates: tt.in}
			got := l.Reserve(100, tt.priority) // 100 tokens at 1000/s = 100 ms
			if diff := cmp.Diff(tt.want, got.QueueEstimates); diff != "" {
				t.Errorf("map (-want +got):\n%s", diff)
			}
			if got.QueueSize != 1 || got.QueuedInputTokens != 100 || got.RunningRequests != 1 || got.TotalInputTokens != 100 {
				t.Errorf("counters not reserved: %+v", got)
			}
		})
	}
	invalid := load.Load{QueueEstimates: []load.PriorityEstimate{{0, 5}}}
	if got := invalid.Reserve(10, 0); got.QueueEstimates != nil {
		t.Errorf("invalid tps must clear the map, got %v", got.QueueEstimates)
	}
	sat := load.Load{InputTPS: 1000, QueueSize: math.MaxUint64, QueueEstimates: []load.PriorityEstimate{{0, math.MaxUint64}}}
	if got := sat.Reserve(10, 0); got.QueueSize != math.MaxUint64 || got.QueueEstimates[0].QueueMs != math.MaxUint64 {
		t.Errorf("reservation must saturate: %+v", got)
	}
}

func TestComparatorScores(t *testing.T) {
	t.Parallel()
	l := load.Load{InputTPS: 150, QueuedInputTokens: 420, QueueSize: 3, RunningRequests: 9, MaxEngineConcurrency: 10}
	est := l.Estimate(2, 30, 0, 1, load.Ignore{})
	want := map[load.Comparator]float64{
		load.ComparatorTTFT:              float64(est.Comparator),
		load.ComparatorQueueTime:         float64(est.Queue),
		load.ComparatorInputWorkSeconds:  3.0,
		load.ComparatorUtilization:       0.9,
		load.ComparatorNumRequestsQueued: 3,
		load.ComparatorNone:              0,
	}
	for c, w := range want {
		if got := c.Score(&l, est, 30); math.Abs(got-w) > 1e-9 {
			t.Errorf("%v: %v, want %v", c, got, w)
		}
	}
}

func TestParseComparator(t *testing.T) {
	t.Parallel()
	for c := load.ComparatorTTFT; c <= load.ComparatorNumRequestsQueued; c++ {
		got, err := load.ParseComparator(c.String())
		if err != nil || got != c {
			t.Errorf("ParseComparator(%q) = %v, %v", c.String(), got, err)
		}
	}
	for _, bad := range []string{"none", "", "TTFT", "latency"} {
		if _, err := load.ParseComparator(bad); err == nil {
			t.Errorf("ParseComparator(%q) accepted", bad)
		}
	}
}

func TestCompareNone(t *testing.T) {
	t.Parallel()
	a := load.Load{RunningRequests: 1, MaxEngineConcurrency: 10}
	b := load.Load{RunningRequests: 1, MaxEngineConcurrency: 2}
	if got := load.CompareNone(&a, 5, &b, 6); got != -1 {
		t.Errorf("less queue first: %d", got)
	}
	if got := load.CompareNone(&a, 5, &b, 5); got != -1 {
		t.Errorf("then percent used (10%% vs 50%%): %d", got)
	}
	c := load.Load{RunningRequests: 3}
	if got := load.CompareNone(&c, 0, &b, 0); got != 1 {
		t.Errorf("an unknown limit compares raw running counts: %d", got)
	}
}

func TestHasCapacity(t *testing.T) {
	t.Parallel()
	full := load.Load{RunningRequests: 4, MaxEngineConcurrency: 4}
	if full.HasCapacity(0) {
		t.Error("4/4 with max_queued 0 has no capacity")
	}
	if !full.HasCapacity(1) || !full.HasCapacity(math.MaxUint64) {
		t.Error("max_queued admits a full engine")
	}
	if !(&load.Load{RunningRequests: 100}).HasCapacity(0) {
		t.Error("unknown limit always has capacity")
	}
}

func TestMillisDuration(t *testing.T) {
	t.Parallel()
	if got := load.Millis(1.5).Duration(); got.Microseconds() != 1500 {
		t.Errorf("1.5 ms = %v", got)
	}
	if got := load.Infinite.Duration(); got != math.MaxInt64 {
		t.Errorf("+Inf saturates: %v", got)
	}
	if got := load.Millis(-3).Duration(); got != 0 {
		t.Errorf("negative clamps to 0: %v", got)
	}
}

// Property: effective queue delay is monotone in queued work.
func TestEffectiveQueueMonotoneProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		l := load.Load{
			InputTPS:             rapid.Float64Range(0, 1e6).Draw(t, "tps"),
			QueuedInputTokens:    rapid.Uint64Range(0, 1<<40).Draw(t, "queued"),
			RunningRequests:      rapid.Uint64Range(0, 64).Draw(t, "running"),
			MaxEngineConcurrency: rapid.Uint64Range(0, 64).Draw(t, "max"),
		}
		more := l
		more.QueuedInputTokens += rapid.Uint64Range(0, 1<<20).Draw(t, "extra")
		priority := rapid.Uint32().Draw(t, "priority")
		if a, b := l.EffectiveQueue(priority), more.EffectiveQueue(priority); a > b {
			t.Fatalf("queue %v with %d tokens > %v with %d tokens", a, l.QueuedInputTokens, b, more.QueuedInputTokens)
		}
		reserved := l.Reserve(rapid.Uint64Range(0, 1<<20).Draw(t, "reserve"), priority)
		if !l.HasFreeSlot() && l.EffectiveQueue(priority) > reserved.EffectiveQueue(priority) {
			t.Fatalf("a reservation lowered the queue estimate")
		}
	})
}

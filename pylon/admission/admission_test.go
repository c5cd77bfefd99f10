package admission_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/pylon/admission"
)

var on = admission.Config{Enabled: true, MinDeltaMs: 25, Tolerance: 1.25}

func TestThreshold(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		c        admission.Config
		expected uint64
		want     uint64
	}{
		{on, 0, 25},
		{on, 100, 125},
		{on, 101, 127}, // ceil(126.25) beats 126
		{on, 1000, 1250},
		{admission.Config{MinDeltaMs: 25, Tolerance: math.NaN()}, 1000, 1025},
		{admission.Config{MinDeltaMs: 25, Tolerance: -2}, 1000, 1025},
		{on, math.MaxUint64, math.MaxUint64},
	} {
		if got := tt.c.Threshold(tt.expected); got != tt.want {
			t.Errorf("Threshold(%d) with %+v = %d, want %d", tt.expected, tt.c, got, tt.want)
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	est := func(ms uint64) *load.Load {
		return &load.Load{InputTPS: 1000, QueuedInputTokens: ms, QueueEstimates: []load.PriorityEstimate{{Priority: 0, QueueMs: ms}}}
	}
	for name, tt := range map[string]struct {
		c        admission.Config
		expected uint64
		has      bool
		l        *load.Load
		priority uint32
		want     admission.Decision
	}{
		"at threshold accepted": {on, 100, true, est(125), 0, admission.Decision{Result: admission.Accepted, ExpectedMs: 100, ActualMs: 125, ThresholdMs: 125}},
		"above rejected":        {on, 100, true, est(126), 0, admission.Decision{Result: admission.Rejected, ExpectedMs: 100, ActualMs: 126, ThresholdMs: 125}},
		"disabled":              {admission.Config{}, 0, true, est(1e6), 0, admission.Decision{Result: admission.Disabled}},
		"missing":               {on, 0, false, est(1e6), 0, admission.Decision{Result: admission.MissingEstimate}},
		"unknown tps": {
			on, 0, true, &load.Load{QueuedInputTokens: 10}, 0,
			admission.Decision{Result: admission.UnknownLocalEstimate},
		},
		"no work, no tps": {on, 0, true, &load.Load{}, 0, admission.Decision{Result: admission.Accepted, ThresholdMs: 25}},
		"free slot": {
			on, 0, true, &load.Load{InputTPS: 1000, QueuedInputTokens: 1e6, RunningRequests: 7, MaxEngineConcurrency: 8}, 0,
			admission.Decision{Result: admission.Accepted, ThresholdMs: 25},
		},
		"slots full": {
			on, 0, true, &load.Load{InputTPS: 1000, QueuedInputTokens: 1000, RunningRequests: 8, MaxEngineConcurrency: 8}, 0,
			admission.Decision{Result: admission.Rejected, ActualMs: 1000, ThresholdMs: 25},
		},
		"explicit empty map derives from queued work": {
			on, 0, true, &load.Load{InputTPS: 1000, QueuedInputTokens: 0, QueueEstimates: []load.PriorityEstimate{}}, 0,
			admission.Decision{Result: admission.Accepted, ThresholdMs: 25},
		},
		"more urgent than all queued work": {
			on, 0, true, &load.Load{InputTPS: 1000, QueuedInputTokens: 5000, QueueEstimates: []load.PriorityEstimate{{Priority: 5, QueueMs: 5000}}}, 3,
			admission.Decision{Result: admission.Accepted, ThresholdMs: 25},
		},
		"nearest lower priority": {
			on, 0, true, &load.Load{InputTPS: 1000, QueuedInputTokens: 5000, QueueEstimates: []load.PriorityEstimate{{Priority: 5, QueueMs: 5000}}}, 9,
			admission.Decision{Result: admission.Rejected, ActualMs: 5000, ThresholdMs: 25},
		},
	} {
		got := admission.Decide(tt.c, tt.expected, tt.has, tt.l, admission.Slots{EngineRunning: tt.l.RunningRequests}, tt.priority)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
		if got.Admit() != (tt.want.Result != admission.Rejected) {
			t.Errorf("%s: Admit() = %v", name, got.Admit())
		}
	}
}

// RequireFreeSlot: an expectation of no queue is refused when the engine runs its known
// concurrency limit, counting every live request (engineRunning), even those the
// gateway's view leaves out; a queue the gateway priced in, an unknown limit or a free
// slot are judged by the estimate as before.
func TestDecideRequireFreeSlot(t *testing.T) {
	t.Parallel()
	strict := on
	strict.RequireFreeSlot = true
	full := func(running uint64) *load.Load {
		return &load.Load{InputTPS: 1000, RunningRequests: running, MaxEngineConcurrency: 8}
	}
	for name, tt := range map[string]struct {
		c        admission.Config
		expected uint64
		l        *load.Load
		running  uint64
		want     admission.Decision
	}{
		"no free slot, no queue expected": {
			strict, 0, full(8), 8,
			admission.Decision{Result: admission.Rejected, ThresholdMs: 25, NoFreeSlot: true, Running: 8, Concurrency: 8},
		},
		"the last slot taken by a request the gateway could not count": {
			strict, 0, full(7), 8,
			admission.Decision{Result: admission.Rejected, ThresholdMs: 25, NoFreeSlot: true, Running: 8, Concurrency: 8},
		},
		"queued work is reported": {
			strict, 0, &load.Load{InputTPS: 1000, QueuedInputTokens: 10, RunningRequests: 9, MaxEngineConcurrency: 8}, 9,
			admission.Decision{Result: admission.Rejected, ActualMs: 10, ThresholdMs: 25, NoFreeSlot: true, Running: 9, Concurrency: 8},
		},
		"the estimate alone rejects": {
			strict, 0, &load.Load{InputTPS: 1000, QueuedInputTokens: 100, RunningRequests: 8, MaxEngineConcurrency: 8}, 8,
			admission.Decision{Result: admission.Rejected, ActualMs: 100, ThresholdMs: 25},
		},
		"unknown estimate": {
			strict, 0, &load.Load{QueuedInputTokens: 100, RunningRequests: 8, MaxEngineConcurrency: 8}, 8,
			admission.Decision{Result: admission.Rejected, ThresholdMs: 25, NoFreeSlot: true, Running: 8, Concurrency: 8},
		},
		"a queue priced in": {strict, 10, full(8), 8, admission.Decision{Result: admission.Accepted, ExpectedMs: 10, ThresholdMs: 35}},
		"a free slot":       {strict, 0, full(7), 7, admission.Decision{Result: admission.Accepted, ThresholdMs: 25}},
		"unknown limit": {
			strict, 0, &load.Load{InputTPS: 1000, RunningRequests: 100}, 100,
			admission.Decision{Result: admission.Accepted, ThresholdMs: 25},
		},
		"not required": {on, 0, full(8), 8, admission.Decision{Result: admission.Accepted, ThresholdMs: 25}},
	} {
		got := admission.Decide(tt.c, tt.expected, true, tt.l, admission.Slots{EngineRunning: tt.running}, 0)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if d := admission.Decide(strict, 0, false, full(8), admission.Slots{EngineRunning: 8}, 0); d.Result != admission.MissingEstimate {
		t.Errorf("no expectation: %+v, want missing_estimate (nothing to hold the gateway to)", d)
	}
}

// SlotShare: an expectation of no queue is also refused while the pylon's own live
// requests fill its share of the engine, whatever the engine's figures say; the engine's
// own limit still applies under the share; a queue priced in, or no share, is judged as
// before.
func TestDecideSlotShare(t *testing.T) {
	t.Parallel()
	shared := on
	shared.RequireFreeSlot, shared.SlotShare = true, 4
	engine := &load.Load{InputTPS: 1000, RunningRequests: 5, MaxEngineConcurrency: 8}
	for name, tt := range map[string]struct {
		c        admission.Config
		expected uint64
		slots    admission.Slots
		want     admission.Decision
	}{
		"share full, engine free": {
			shared, 0,
			admission.Slots{EngineRunning: 5, Own: 4},
			admission.Decision{Result: admission.Rejected, ThresholdMs: 25, NoFreeSlot: true, Share: true, Running: 4, Concurrency: 4},
		},
		"share free": {shared, 0, admission.Slots{EngineRunning: 5, Own: 3}, admission.Decision{Result: admission.Accepted, ThresholdMs: 25}},
		"share free, engine full": {
			shared, 0,
			admission.Slots{EngineRunning: 8, Own: 3},
			admission.Decision{Result: admission.Rejected, ThresholdMs: 25, NoFreeSlot: true, Running: 8, Concurrency: 8},
		},
		"a queue priced in": {
			shared, 10,
			admission.Slots{EngineRunning: 5, Own: 6},
			admission.Decision{Result: admission.Accepted, ExpectedMs: 10, ThresholdMs: 35},
		},
		"no share": {
			func() admission.Config { c := shared; c.SlotShare = 0; return c }(), 0,
			admission.Slots{EngineRunning: 5, Own: 5},
			admission.Decision{Result: admission.Accepted, ThresholdMs: 25},
		},
		"free slot not required": {
			func() admission.Config { c := shared; c.RequireFreeSlot = false; return c }(), 0,
			admission.Slots{EngineRunning: 5, Own: 4},
			admission.Decision{Result: admission.Accepted, ThresholdMs: 25},
		},
	} {
		got := admission.Decide(tt.c, tt.expected, true, engine, tt.slots, 0)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

// A request admitted past the share (its pylon's own requests at the engine, itself
// included, above the share) is held only with a share and a wait; a held one goes on once
// the share has a free slot.
func TestHoldsPastShare(t *testing.T) {
	t.Parallel()
	shared := admission.Config{SlotShare: 2, SlotShareWait: time.Second}
	for _, tc := range []struct {
		c              admission.Config
		atEngine       uint64
		holds, hasRoom bool
	}{
		{shared, 1, false, true},
		{shared, 2, false, false},
		{shared, 3, true, false},
		{admission.Config{SlotShare: 2}, 3, false, false}, // no wait: the engine queues it
		{admission.Config{SlotShareWait: time.Second}, 9, false, true},
	} {
		if got := tc.c.HoldsPastShare(tc.atEngine); got != tc.holds {
			t.Errorf("%+v at %d: holds %v, want %v", tc.c, tc.atEngine, got, tc.holds)
		}
		if got := tc.c.ShareHasRoom(tc.atEngine); got != tc.hasRoom {
			t.Errorf("%+v at %d: room %v, want %v", tc.c, tc.atEngine, got, tc.hasRoom)
		}
	}
}

func TestResultNames(t *testing.T) {
	t.Parallel()
	got := make([]string, 0, len(admission.Results))
	for _, r := range admission.Results {
		got = append(got, r.String())
	}
	want := []string{"accepted", "rejected", "missing_estimate", "unknown_local_estimate", "disabled"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// Property: a rejection means the local estimate exceeds the threshold or, with
// RequireFreeSlot, that no queue was expected of an engine without a free slot or of a
// pylon whose own requests fill its slot share; the threshold is never below the expected
// delay plus the minimum delta.
func TestDecideProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		c := on
		c.RequireFreeSlot = rapid.Bool().Draw(t, "require_free_slot")
		expected := rapid.Uint64Range(0, 1e7).Draw(t, "expected")
		if rapid.Bool().Draw(t, "expect_no_queue") {
			expected = 0
		}
		queued := rapid.Uint64Range(0, 1e7).Draw(t, "queued")
		tps := rapid.Float64Range(1, 1e5).Draw(t, "tps")
		limit := rapid.Uint64Range(0, 16).Draw(t, "limit")
		running := rapid.Uint64Range(0, 20).Draw(t, "running")
		engine := running + rapid.Uint64Range(0, 3).Draw(t, "not_counted")
		c.SlotShare = rapid.Uint64Range(0, 16).Draw(t, "share")
		own := rapid.Uint64Range(0, engine).Draw(t, "own")
		l := &load.Load{InputTPS: tps, QueuedInputTokens: queued, RunningRequests: running, MaxEngineConcurrency: limit}
		d := admission.Decide(c, expected, true, l, admission.Slots{EngineRunning: engine, Own: own}, 0)
		if d.ThresholdMs < expected+25 {
			t.Fatalf("threshold %d below expected %d + 25", d.ThresholdMs, expected)
		}
		shareFull := c.RequireFreeSlot && expected == 0 && c.SlotShare > 0 && own >= c.SlotShare
		noSlot := shareFull || c.RequireFreeSlot && expected == 0 && limit > 0 && engine >= limit
		if d.NoFreeSlot != (noSlot && d.ActualMs <= d.ThresholdMs) {
			t.Fatalf("NoFreeSlot %v, want %v: %+v", d.NoFreeSlot, noSlot, d)
		}
		if d.Share != (shareFull && d.ActualMs <= d.ThresholdMs) {
			t.Fatalf("Share %v, want %v: %+v", d.Share, shareFull, d)
		}
		if (d.Result == admission.Rejected) != (noSlot || d.ActualMs > d.ThresholdMs) {
			t.Fatalf("inconsistent decision %+v", d)
		}
	})
}

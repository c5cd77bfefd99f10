package stats_test

import (
	"testing"

	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/stats"
)

// burstAggregate is a model at 1000 input tokens/s: a burst's dispatches of 100 tokens
// each expect 100 ms of queue per predecessor.
func burstAggregate() *stats.Aggregate {
	return stats.NewAggregate("m", 1, stats.Options{InitialInputTPS: 1000, PinInputTPS: true})
}

type gw struct{ id string }

// A gateway's later dispatches that overtook an earlier one are not in the queue its
// expectation is compared with: each is judged against its predecessors that arrived
// before it, whatever the arrival order, and admitted.
func TestAdmitLeavesOutTheGatewaysLaterDispatches(t *testing.T) {
	t.Parallel()
	arrivals := []struct{ seq, actual uint64 }{{2, 0}, {4, 100}, {3, 100}, {1, 0}}
	a := burstAggregate()
	g := &gw{"gw-1"}
	for _, r := range arrivals {
		expected := (r.seq - 1) * 100
		d := a.AdmitDispatch("r"+string(rune('0'+r.seq)), 0, 100, expected, true, stats.Dispatch{From: g, Seq: r.seq}, on, t0)
		if d.Result != admission.Accepted || d.ActualMs != r.actual {
			t.Errorf("dispatch %d: %+v, want accepted against %d ms", r.seq, d, r.actual)
		}
	}
	// Without the dispatch order (the same arrivals, no gateway), the first granted one
	// sees the three later ones and is refused.
	b := burstAggregate()
	for _, r := range arrivals[:3] {
		if d := b.Admit("r"+string(rune('0'+r.seq)), 0, 100, (r.seq-1)*100, true, on, t0); d.Result != admission.Accepted {
			t.Fatalf("without dispatch seqs, dispatch %d: %+v", r.seq, d)
		}
	}
	if d := b.Admit("r1", 0, 100, 0, true, on, t0); d.Result != admission.Rejected || d.ActualMs != 300 {
		t.Errorf("without dispatch seqs: %+v, want rejected (300 ms queued)", d)
	}
}

// Another gateway's requests, and direct ones, still count: that is the load the
// gateway's expectation could not know about.
func TestAdmitCountsOtherGatewaysLoad(t *testing.T) {
	t.Parallel()
	a := burstAggregate()
	mine, other := &gw{"gw-1"}, &gw{"gw-2"}
	a.AdmitDispatch("o1", 0, 300, 0, true, stats.Dispatch{From: other, Seq: 9}, on, t0)
	a.AdmitDispatch("m2", 0, 100, 0, true, stats.Dispatch{From: mine, Seq: 2}, on, t0)
	d := a.AdmitDispatch("m1", 0, 100, 0, true, stats.Dispatch{From: mine, Seq: 1}, on, t0)
	if d.Result != admission.Rejected || d.ActualMs != 300 {
		t.Errorf("%+v: want rejected on the other gateway's 300 ms only", d)
	}
}

// A late dispatch (admitted after a later one of its gateway) is left out of the queue of
// the gateway's next dispatches too: a load report sent in between echoed the later seq,
// so the gateway dropped the late one's reservation while the report did not hold it.
func TestAdmitLeavesOutLateDispatches(t *testing.T) {
	t.Parallel()
	a := burstAggregate()
	g := &gw{"gw-1"}
	a.AdmitDispatch("r2", 0, 100, 100, true, stats.Dispatch{From: g, Seq: 2}, on, t0) // the report: echo 2, 100 ms queued
	a.AdmitDispatch("r1", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 1}, on, t0)   // late
	// The gateway's view: the report (r2 only) and its reservation of dispatch 3 itself.
	d := a.AdmitDispatch("r3", 0, 100, 100, true, stats.Dispatch{From: g, Seq: 3}, on, t0)
	if d.Result != admission.Accepted || d.ActualMs != 100 {
		t.Errorf("next dispatch: %+v, want accepted against 100 ms (the late one left out)", d)
	}
	// Once the late one is being processed and then generating, it leaves the queue and
	// nothing is scanned any more.
	a.ResponseStarted("r1")
	a.FirstOutput("r1", t0)
	a.ResponseStarted("r2")
	a.FirstOutput("r2", t0)
	a.ResponseStarted("r3")
	a.FirstOutput("r3", t0)
	if d := a.AdmitDispatch("r4", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 4}, on, t0); d.Result != admission.Accepted || d.ActualMs != 0 {
		t.Errorf("after the burst: %+v", d)
	}
}

// The running count loses the left-out requests too (the free-slot rule).
func TestAdmitFreeSlotWithoutLaterDispatches(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{FallbackConcurrency: 2, InitialInputTPS: 1000, PinInputTPS: true})
	g := &gw{"gw-1"}
	a.AdmitDispatch("r3", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 3}, on, t0)
	a.AdmitDispatch("r2", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 2}, on, t0)
	// The gateway saw a free slot for dispatch 1 (nothing ahead of it): so does the pylon.
	if d := a.AdmitDispatch("r1", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 1}, on, t0); d.Result != admission.Accepted || d.ActualMs != 0 {
		t.Errorf("%+v, want accepted with a free slot", d)
	}
	// Requiring a free slot, the pylon refuses it: its later dispatches took both slots
	// and it would wait at the engine for one of them to end.
	b := stats.NewAggregate("m", 1, stats.Options{FallbackConcurrency: 2, InitialInputTPS: 1000, PinInputTPS: true})
	strict := on
	strict.RequireFreeSlot = true
	b.AdmitDispatch("r3", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 3}, strict, t0)
	b.AdmitDispatch("r2", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 2}, strict, t0)
	if d := b.AdmitDispatch("r1", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 1}, strict, t0); d.Result != admission.Rejected || !d.NoFreeSlot || d.Running != 2 || d.Concurrency != 2 {
		t.Errorf("%+v, want rejected: no free slot (2 of 2 running)", d)
	}
}

// With a slot share, the pylon refuses a request expected to queue 0 ms once its own live
// requests fill the share, though the engine (limit 4, nothing else running) has room:
// the other pylons in front of it may have filled the rest. A request the gateway expected
// to queue is judged by the estimate alone; a request that ends frees its slot of the share.
func TestAdmitSlotShare(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{FallbackConcurrency: 4, InitialInputTPS: 1000, PinInputTPS: true})
	shared := on
	shared.RequireFreeSlot, shared.SlotShare = true, 2
	for _, id := range []string{"r1", "r2"} {
		if d := a.Admit(id, 0, 100, 0, true, shared, t0); d.Result != admission.Accepted {
			t.Fatalf("%s: %+v, want accepted within the share", id, d)
		}
	}
	if d := a.Admit("r3", 0, 100, 0, true, shared, t0); d.Result != admission.Rejected || !d.Share || d.Running != 2 || d.Concurrency != 2 {
		t.Errorf("%+v, want rejected: the share's 2 slots taken", d)
	}
	if d := a.Admit("r4", 0, 100, 1000, true, shared, t0); d.Result != admission.Accepted {
		t.Errorf("%+v, want a queue priced in accepted", d)
	}
	a.Finish("r1", 1, 0, t0)
	a.Finish("r4", 1, 0, t0)
	if d := a.Admit("r5", 0, 100, 0, true, shared, t0); d.Result == admission.Rejected {
		t.Errorf("%+v, want a freed slot of the share taken", d)
	}
}

// A request held back from the engine (Hold) stays live and queued, its prompt work in the
// published queue, and counts in the share's own requests for admission, but not among
// those at the engine nor in the published running count; Unhold, or its end, takes it back out of the held count once.
func TestHoldLeavesTheEngineCount(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{FallbackConcurrency: 4, InitialInputTPS: 1000, PinInputTPS: true})
	shared := on
	shared.RequireFreeSlot, shared.SlotShare = true, 2
	a.Admit("r1", 0, 100, 0, true, shared, t0)
	a.Admit("r2", 0, 100, 0, true, shared, t0)
	a.Admit("r3", 0, 300, 1000, true, shared, t0)
	if !a.Hold("r3") || a.Hold("r3") || a.Hold("gone") {
		t.Fatal("Hold: want true for a live request, false held twice or for an unknown one")
	}
	if got := a.AtEngine(); got != 2 {
		t.Errorf("AtEngine %d with one of 3 held, want 2", got)
	}
	if l := a.Load(t0); l.QueuedInputTokens != 500 || l.QueueSize != 3 || l.RunningRequests != 2 {
		t.Errorf("queued %d tokens in %d requests, %d running; want 500 in 3 (the held request waits too), 2 running", l.QueuedInputTokens, l.QueueSize, l.RunningRequests)
	}
	if d := a.Admit("r4", 0, 100, 0, true, shared, t0); d.Result != admission.Rejected || !d.Share || d.Running != 3 {
		t.Errorf("%+v, want rejected: the share's slots taken, the held request counted", d)
	}
	if !a.Unhold("r3") || a.Unhold("r3") || a.AtEngine() != 3 {
		t.Errorf("Unhold: want true once, then false; AtEngine %d, want 3", a.AtEngine())
	}
	a.Hold("r3")
	a.Finish("r3", 1, 0, t0)
	a.Finish("r1", 1, 0, t0)
	if got := a.AtEngine(); got != 1 || a.Live() != 1 {
		t.Errorf("AtEngine %d, live %d after a held request and another ended, want 1 and 1", got, a.Live())
	}
}

// A gateway that restarts with the same id counts its dispatches from 1 again: they are
// not taken for late ones of the old numbering.
func TestAdmitAfterGatewayRestart(t *testing.T) {
	t.Parallel()
	a := burstAggregate()
	g := &gw{"gw-1"}
	a.AdmitDispatch("old", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 1 << 20}, on, t0)
	a.AdmitDispatch("new1", 0, 100, 100, true, stats.Dispatch{From: g, Seq: 1}, on, t0)
	// new1 is not late: the next dispatch is judged against both queued requests.
	if d := a.AdmitDispatch("new2", 0, 100, 0, true, stats.Dispatch{From: g, Seq: 2}, on, t0); d.Result != admission.Rejected || d.ActualMs != 200 {
		t.Errorf("%+v, want rejected against 200 ms", d)
	}
}

// A request the gateway expects mostly cached counts only its expected prefill as queued
// work, in every phase before output and for every later request's admission; without the
// expectation, and with one above the input, its whole input counts.
func TestAdmitCountsTheGatewaysPrefillExpectation(t *testing.T) {
	t.Parallel()
	g := &gw{"gw-1"}
	for _, tc := range []struct {
		name string
		from stats.Dispatch
		want uint64
	}{
		{"no expectation", stats.Dispatch{From: g, Seq: 1}, 800},
		{"suffix only", stats.Dispatch{From: g, Seq: 1, Prefill: 50, HasPrefill: true}, 50},
		{"above the input", stats.Dispatch{From: g, Seq: 1, Prefill: 5000, HasPrefill: true}, 800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := burstAggregate()
			a.AdmitDispatch("cached", 0, 800, 0, true, tc.from, on, t0)
			if n, work := a.PhaseCounts(stats.Pending); n != 1 || work != tc.want {
				t.Errorf("pending: %d requests, %d tokens; want 1, %d", n, work, tc.want)
			}
			if l := a.Load(t0); l.QueuedInputTokens != tc.want || l.TotalInputTokens != tc.want {
				t.Errorf("published queued %d total %d, want %d", l.QueuedInputTokens, l.TotalInputTokens, tc.want)
			}
			a.ResponseStarted("cached")
			if _, work := a.PhaseCounts(stats.InputProcessing); work != tc.want {
				t.Errorf("processing: %d tokens, want %d", work, tc.want)
			}
			// The next request is judged against the cached one's expected work only (1000
			// tokens/s: want/1000 s of queue).
			d := a.Admit("next", 0, 100, 0, true, on, t0)
			if d.ActualMs != tc.want {
				t.Errorf("the next request sees %d ms of queue, want %d", d.ActualMs, tc.want)
			}
			a.Finish("cached", 0, 0, t0)
			a.Finish("next", 0, 0, t0)
			if l := a.Load(t0); l.QueuedInputTokens != 0 || l.TotalInputTokens != 0 {
				t.Errorf("after finishing: queued %d total %d", l.QueuedInputTokens, l.TotalInputTokens)
			}
		})
	}
}

// A request waiting for a prompt in flight expects to prefill only the rest of its input,
// unless the gateway already expected less.
func TestAtMostPrefill(t *testing.T) {
	for _, c := range []struct {
		d              stats.Dispatch
		input, cached  uint64
		want           uint64
		wantHasPrefill bool
	}{
		{stats.Dispatch{}, 1000, 800, 200, true},
		{stats.Dispatch{Prefill: 500, HasPrefill: true}, 1000, 800, 200, true},
		{stats.Dispatch{Prefill: 100, HasPrefill: true}, 1000, 800, 100, true},
		{stats.Dispatch{}, 1000, 1000, 0, false},
		{stats.Dispatch{}, 1000, 1200, 0, false},
	} {
		d := c.d
		d.AtMostPrefill(c.input, c.cached)
		if d.Prefill != c.want || d.HasPrefill != c.wantHasPrefill {
			t.Errorf("%+v.AtMostPrefill(%d, %d) = %d %v, want %d %v", c.d, c.input, c.cached, d.Prefill, d.HasPrefill, c.want, c.wantHasPrefill)
		}
	}
}

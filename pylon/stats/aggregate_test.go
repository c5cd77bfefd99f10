package stats_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/stats"
)

var (
	t0 = time.Unix(1_700_000_000, 0)
	on = admission.Config{Enabled: true, MinDeltaMs: 25, Tolerance: 1.25}
)

func TestAdmitExcludesOwnRequest(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{FallbackConcurrency: 1, InitialInputTPS: 1000})
	// Nothing else is live: the free-slot rule holds although this request will take the
	// only slot, and its own 1000 tokens do not count.
	if d := a.Admit("r1", 0, 1000, 0, true, on, t0); d.Result != admission.Accepted || d.ActualMs != 0 {
		t.Fatalf("first request: %+v, want accepted with actual 0", d)
	}
	// The slot is now taken by r1 (1000 tokens pending at 1000 tok/s = 1000 ms).
	d := a.Admit("r2", 0, 1000, 0, true, on, t0)
	if diff := cmp.Diff(admission.Decision{Result: admission.Rejected, ActualMs: 1000, ThresholdMs: 25}, d); diff != "" {
		t.Errorf("second request (-want +got):\n%s", diff)
	}
	if a.Live() != 1 {
		t.Errorf("a rejected request must not be tracked: live %d", a.Live())
	}
	// The gateway expected 800 ms: threshold max(825, 1000) = 1000 → accepted at the threshold.
	if d := a.Admit("r3", 0, 10, 800, true, on, t0); d.Result != admission.Accepted || d.ThresholdMs != 1000 {
		t.Errorf("at the threshold: %+v", d)
	}
	if d := a.Admit("r4", 0, 10, 799, true, on, t0); d.Result != admission.Rejected {
		t.Errorf("just above the threshold (1010 ms > 999): %+v", d)
	}
}

func TestPhaseAndPriorityAccounting(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{InitialInputTPS: 1000, PinInputTPS: true})
	off := admission.Config{}
	a.Admit("p5", 5, 1000, 0, false, off, t0)
	a.Admit("p2", 2, 500, 0, false, off, t0)
	a.Admit("ip", 7, 300, 0, false, off, t0)
	a.ResponseStarted("ip") // InputProcessing work counts at priority 0
	a.Admit("og", 1, 4000, 0, false, off, t0)
	a.ResponseStarted("og")
	a.FirstOutput("og", t0.Add(time.Second)) // OutputGeneration: no prompt work

	l := a.Load(t0)
	want := []load.PriorityEstimate{{Priority: 0, QueueMs: 300}, {Priority: 2, QueueMs: 800}, {Priority: 5, QueueMs: 1800}}
	if diff := cmp.Diff(want, l.QueueEstimates); diff != "" {
		t.Errorf("priority map (-want +got):\n%s", diff)
	}
	if l.QueueSize != 3 || l.QueuedInputTokens != 1800 || l.RunningRequests != 4 || l.TotalInputTokens != 5800 ||
		l.InputProcessingRequests != 1 || l.OutputGenerationRequests != 1 {
		t.Errorf("counts: %+v", l)
	}
	for _, tt := range []struct {
		priority uint32
		want     admission.Result
	}{{0, admission.Rejected}, {1, admission.Rejected}} {
		if d := a.Admit("x", tt.priority, 1, 0, true, on, t0); d.Result != tt.want {
			t.Errorf("priority %d: %+v", tt.priority, d)
		}
	}
	// With expected = 300 the threshold is 375: priority 0/1 see 300 ms (accepted), 2–4 see 800.
	if d := a.Admit("y", 1, 1, 300, true, on, t0); d.Result != admission.Accepted || d.ActualMs != 300 {
		t.Errorf("priority 1 with expected 300: %+v", d)
	}
	if d := a.Admit("z", 4, 1, 300, true, on, t0); d.Result != admission.Rejected || d.ActualMs != 801 {
		t.Errorf("priority 4 with expected 300: %+v", d)
	}
	for _, id := range []string{"p5", "p2", "ip", "og", "y"} {
		a.Finish(id, 0, 0, t0)
	}
	l = a.Load(t0)
	if l.QueueEstimates == nil || len(l.QueueEstimates) != 0 || l.RunningRequests != 0 {
		t.Errorf("idle with valid tps must publish an explicit empty map: %+v", l)
	}
	s := wire.StatsFromLoad(&l)
	data, _ := json.Marshal(s)
	if !strings.Contains(string(data), `"queue_time_estimate_ms_by_priority":{}`) {
		t.Errorf("wire form lacks the explicit empty map: %s", data)
	}
	unknown := stats.NewAggregate("m", 1, stats.Options{}).Load(t0)
	if unknown.QueueEstimates != nil {
		t.Errorf("unknown tps must publish no map: %+v", unknown.QueueEstimates)
	}
}

func TestConcurrencyPrecedenceAndGenerations(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 3, stats.Options{FallbackConcurrency: 8})
	if got := a.Load(t0).MaxEngineConcurrency; got != 8 {
		t.Fatalf("fallback from the start: %d", got)
	}
	steps := []struct {
		u    stats.Update
		ok   bool
		want uint64
	}{
		{stats.Update{Generation: 3, Concurrency: &stats.ConcurrencyReport{MaxEngineConcurrency: 25}}, true, 25},
		{stats.Update{Generation: 3}, true, 25}, // ping without the field: unchanged
		{stats.Update{Generation: 2, Concurrency: &stats.ConcurrencyReport{MaxEngineConcurrency: 99}}, false, 25},
		{stats.Update{Generation: 3, Concurrency: &stats.ConcurrencyReport{MaxEngineConcurrency: 0}}, true, 8},
		{stats.Update{Generation: 4, KV: &stats.KVStats{CapacityTokens: 1}}, false, 8},
	}
	for i, s := range steps {
		if ok := a.Apply(&s.u, t0); ok != s.ok {
			t.Errorf("step %d: applied %v, want %v", i, ok, s.ok)
		}
		if got := a.MaxEngineConcurrency(); got != s.want {
			t.Errorf("step %d: concurrency %d, want %d", i, got, s.want)
		}
	}
	if a.Load(t0).KVCapacityTokens != 0 {
		t.Error("an update for another generation changed the KV figures")
	}
	none := stats.NewAggregate("m", 1, stats.Options{})
	none.Apply(&stats.Update{Generation: 1, Concurrency: &stats.ConcurrencyReport{MaxEngineConcurrency: 4}}, t0)
	if none.MaxEngineConcurrency() != 4 {
		t.Error("engine report without a fallback")
	}
}

func TestThroughputPublishRule(t *testing.T) {
	t.Parallel()
	var tp stats.Throughput
	for i, v := range []float64{100, 200, 0, -1, 300, 400} {
		tp.Add(v)
		if tp.Published() != 0 {
			t.Fatalf("published after %d samples", i+1)
		}
	}
	tp.Add(500)
	if tp.Count() != 5 || tp.Published() != 300 || tp.Min() != 100 || tp.Max() != 500 || tp.Variance() != 25000 {
		t.Errorf("after 5 samples: n=%d mean=%v min=%v max=%v var=%v", tp.Count(), tp.Published(), tp.Min(), tp.Max(), tp.Variance())
	}
	var boot stats.Throughput
	boot.Bootstrap(1000, false)
	if boot.Published() != 1000 {
		t.Errorf("bootstrap must publish at once: %v", boot.Published())
	}
	boot.Add(1600)
	if boot.Published() != 1100 {
		t.Errorf("bootstrap counts as 5 samples: %v, want 1100", boot.Published())
	}
	var pinned stats.Throughput
	pinned.Bootstrap(1000, true)
	pinned.Add(5000)
	if pinned.Published() != 1000 {
		t.Errorf("pinned moved: %v", pinned.Published())
	}
	var w stats.OutputWindow
	for i := range 10 {
		w.Add(float64(i + 1))
	}
	if w.Mean() != 6.5 || w.Max() != 10 { // last 8: 3..10
		t.Errorf("window mean %v max %v", w.Mean(), w.Max())
	}
	w.Clear()
	if w.Mean() != 0 || w.Max() != 10 {
		t.Errorf("cleared window mean %v max %v", w.Mean(), w.Max())
	}
}

func TestEngineStreamSamples(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{})
	a.Admit("r", 0, 100, 0, false, admission.Config{}, t0)
	ev := func(at time.Duration, processed, generated uint64, finished bool) {
		a.Apply(&stats.Update{Generation: 1, Stats: &stats.RequestEvent{RequestID: "r", TokensProcessed: processed, TokensGenerated: generated, Finished: finished}}, t0.Add(at))
	}
	ev(5*time.Millisecond, 100, 0, false)  // first sample clamped to 10 ms: 10000 tok/s
	ev(8*time.Millisecond, 150, 0, false)  // too soon: accumulated
	ev(25*time.Millisecond, 300, 1, false) // 200 tokens over 20 ms: 10000 tok/s
	ev(125*time.Millisecond, 300, 11, false)
	ev(200*time.Millisecond, 300, 20, true)
	ev(300*time.Millisecond, 900, 90, false) // after finished: ignored
	in := a.Input()
	if in.Count() != 2 || in.Mean() != 10000 {
		t.Errorf("input samples n=%d mean=%v, want 2 × 10000", in.Count(), in.Mean())
	}
	l := a.Load(t0.Add(time.Second))
	if l.OutputTPS != 110 || l.MaxOutputTPS != 120 { // 10/0.1 s and 9/0.075 s
		t.Errorf("output tps %v max %v", l.OutputTPS, l.MaxOutputTPS)
	}
	if diff := cmp.Diff([]string{stats.SourceEngineStatsStream}, l.Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	// While the stream feeds the model, fallback samples are not taken.
	a.ResponseStarted("r")
	if a.FirstOutput("r", t0.Add(time.Second)) {
		t.Error("fallback sample taken while the stream feeds the model")
	}
	a.Sweep(t0.Add(200*time.Millisecond + stats.ModelStatsTTL))
	if a.Load(t0).OutputTPS != 0 {
		t.Error("stale output tps not cleared")
	}
	if a.Load(t0).InputTPS != 0 { // 2 samples: not yet publishable
		t.Error("input tps published with 2 samples")
	}
}

func TestFallbackSamples(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{})
	for i := range 5 {
		id := string(rune('a' + i))
		a.Admit(id, 0, 1000, 0, false, admission.Config{}, t0)
		a.ResponseStarted(id)
		if !a.FirstOutput(id, t0.Add(500*time.Millisecond)) {
			t.Fatalf("no fallback sample for %s", id)
		}
		a.Finish(id, 11, time.Second, t0.Add(1500*time.Millisecond))
	}
	l := a.Load(t0)
	if l.InputTPS != 2000 || l.OutputTPS != 10 {
		t.Errorf("fallback tps in %v out %v", l.InputTPS, l.OutputTPS)
	}
	if diff := cmp.Diff([]string{stats.SourceChunkUsage}, l.Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
}

// A request's whole life in the aggregate — admission, engine headers, first output,
// finish — allocates nothing once warm (requests are kept by value).
func TestRequestLifecycleAllocatesNothing(t *testing.T) {
	a := stats.NewAggregate("m", 1, stats.Options{FallbackConcurrency: 8, InitialInputTPS: 1000})
	ids := []string{"r1", "r2", "r3", "r4"}
	now := t0
	life := func() {
		for _, id := range ids {
			now = now.Add(time.Millisecond)
			if d := a.Admit(id, 0, 100, 0, false, on, now); !d.Admit() {
				t.Fatalf("%s rejected: %+v", id, d)
			}
		}
		for _, id := range ids {
			a.ResponseStarted(id)
			now = now.Add(time.Millisecond)
			a.FirstOutput(id, now)
			a.Finish(id, 10, 5*time.Millisecond, now)
		}
	}
	life() // warm the maps and scratch buffers
	if n := testing.AllocsPerRun(100, life); n != 0 {
		t.Errorf("%.1f allocations per %d request lifecycles, want 0", n, len(ids))
	}
	if a.Live() != 0 {
		t.Errorf("%d requests still live", a.Live())
	}
}

// The engine's stats stream reports every request the engine runs, those another backend
// in front of the same engine relayed included: the published running count is the
// engine's, not only the pylon's share. Another backend's request finished, or not
// reported for EngineViewTTL, no longer counts; its next event counts it again.
func TestStreamShowsTheEngineRunningCount(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{})
	a.Admit("own", 0, 100, 0, false, admission.Config{}, t0)
	ev := func(at time.Duration, id string, finished bool) {
		a.Apply(&stats.Update{Generation: 1, Stats: &stats.RequestEvent{RequestID: id, TokensProcessed: 10, Finished: finished}}, t0.Add(at))
	}
	running := func(at time.Duration) uint64 { return a.Load(t0.Add(at)).RunningRequests }
	if got := running(0); got != 1 {
		t.Fatalf("before any event: running %d, want the pylon's own 1", got)
	}
	ev(time.Millisecond, "own", false)
	ev(time.Millisecond, "sibling-1", false)
	ev(2*time.Millisecond, "sibling-2", false)
	if got := running(3 * time.Millisecond); got != 3 {
		t.Errorf("three running at the engine, one of them relayed here: running %d, want 3", got)
	}
	ev(4*time.Millisecond, "sibling-1", true)
	if got := running(5 * time.Millisecond); got != 2 {
		t.Errorf("after one finished: running %d, want 2", got)
	}
	ev(time.Second, "sibling-2", false)
	if !a.Sweep(t0.Add(stats.EngineViewTTL + 2*time.Millisecond)) {
		t.Error("the sweep that stopped counting a silent request reported no change")
	}
	// own is still live here, so it still counts, beside sibling-2 (reported 1 s in).
	if got := running(stats.EngineViewTTL + 3*time.Millisecond); got != 2 {
		t.Errorf("after %v without news of own: running %d, want 2 (sibling-2 reported 1 s in; own is live here)", stats.EngineViewTTL, got)
	}
	ev(stats.EngineViewTTL+10*time.Millisecond, "own", false)
	if got := running(stats.EngineViewTTL + 11*time.Millisecond); got != 2 {
		t.Errorf("own reported again: running %d, want 2", got)
	}
}

// The pylon's own requests the stream has not shown yet are on their way to the engine:
// the published running count adds them to the stream's, once the stream has named one of
// the pylon's requests. A stream that names requests its own way (never one of the
// pylon's ids) is not added to: its requests may be the pylon's own under other names.
func TestOwnRequestsOnTheirWayCountBesideTheStream(t *testing.T) {
	t.Parallel()
	ev := func(a *stats.Aggregate, at time.Duration, id string, finished bool) {
		a.Apply(&stats.Update{Generation: 1, Stats: &stats.RequestEvent{RequestID: id, TokensProcessed: 10, Finished: finished}}, t0.Add(at))
	}
	running := func(a *stats.Aggregate, at time.Duration) uint64 { return a.Load(t0.Add(at)).RunningRequests }

	a := stats.NewAggregate("m", 1, stats.Options{})
	a.Admit("own-1", 0, 100, 0, false, admission.Config{}, t0)
	ev(a, time.Millisecond, "own-1", false)
	ev(a, time.Millisecond, "sibling-1", false)
	ev(a, time.Millisecond, "sibling-2", false)
	a.Admit("own-2", 0, 100, 0, false, admission.Config{}, t0.Add(2*time.Millisecond))
	a.Admit("own-3", 0, 100, 0, false, admission.Config{}, t0.Add(2*time.Millisecond))
	if got := running(a, 3*time.Millisecond); got != 5 {
		t.Errorf("three at the engine (one of them own-1) and two own on their way: running %d, want 5", got)
	}
	ev(a, 4*time.Millisecond, "own-2", false)
	if got := running(a, 5*time.Millisecond); got != 5 {
		t.Errorf("own-2 reached the engine: running %d, want still 5", got)
	}
	ev(a, 6*time.Millisecond, "own-1", true) // finished at the engine, its relay not yet done
	if got := running(a, 7*time.Millisecond); got != 4 {
		t.Errorf("own-1 finished at the engine: running %d, want 4", got)
	}
	a.Finish("own-1", 10, 0, t0.Add(8*time.Millisecond))
	a.Finish("own-3", 10, 0, t0.Add(8*time.Millisecond)) // never reached the stream
	if got := running(a, 9*time.Millisecond); got != 3 {
		t.Errorf("own-1 and own-3 done: running %d, want 3 (own-2 and two siblings)", got)
	}

	b := stats.NewAggregate("m", 1, stats.Options{})
	b.Admit("own-1", 0, 100, 0, false, admission.Config{}, t0)
	b.Admit("own-2", 0, 100, 0, false, admission.Config{}, t0)
	ev(b, time.Millisecond, "engine-7", false)
	ev(b, time.Millisecond, "engine-8", false)
	ev(b, time.Millisecond, "engine-9", false)
	if got := running(b, 2*time.Millisecond); got != 3 {
		t.Errorf("a stream of its own ids: running %d, want the larger count, 3", got)
	}
}

// An own request whose engine finished it long before its relay ended loses its engine
// state to the sweep: the count of own requests seen in the stream must not outlive it, or
// the requests on their way to the engine would be undercounted from then on.
func TestOwnRequestSweptBeforeItsRelayEnds(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{})
	ev := func(at time.Duration, id string, finished bool) {
		a.Apply(&stats.Update{Generation: 1, Stats: &stats.RequestEvent{RequestID: id, TokensProcessed: 10, Finished: finished}}, t0.Add(at))
	}
	a.Admit("own-1", 0, 100, 0, false, admission.Config{}, t0)
	ev(time.Millisecond, "own-1", false)
	ev(2*time.Millisecond, "own-1", true)
	a.Sweep(t0.Add(stats.ModelStatsTTL + time.Second)) // own-1's engine state is dropped
	a.Finish("own-1", 10, 0, t0.Add(stats.ModelStatsTTL+2*time.Second))
	late := stats.ModelStatsTTL + 3*time.Second
	a.Admit("own-2", 0, 100, 0, false, admission.Config{}, t0.Add(late))
	ev(late, "sibling", false)
	if got := a.Load(t0.Add(late + time.Millisecond)).RunningRequests; got != 2 {
		t.Errorf("sibling at the engine and own-2 on its way: running %d, want 2", got)
	}
}

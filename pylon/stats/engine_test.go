package stats_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/stats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// off is admission switched off: every request is tracked.
var off = admission.Config{}

// published are the load fields the engine's view and the pylon's own combine into.
type published struct {
	Running, Queue, Queued, Total uint64
}

func publishedOf(l *load.Load) published {
	return published{l.RunningRequests, l.QueueSize, l.QueuedInputTokens, l.TotalInputTokens}
}

// The engine's running and waiting counts combine with the pylon's own: the maximum of
// each, the pylon's prompt tokens for the work it relayed and the engine's mean prompt
// for waiting requests beyond its own queue; a shared engine only lifts the running count.
func TestEngineLoadCombinesWithOwn(t *testing.T) {
	t.Parallel()
	type own struct {
		id     string
		tokens uint64
		phase  stats.Phase
	}
	for _, tt := range []struct {
		name   string
		own    []own
		engine stats.EngineMetrics
		want   published
	}{
		{"engine only", nil, stats.EngineMetrics{HasLoad: true, Running: 3, Waiting: 2, MeanPromptTokens: 345.2}, published{3, 2, 690, 690}},
		{
			"pylon ahead of the engine's last scrape",
			[]own{{"a", 100, stats.Pending}, {"b", 100, stats.Pending}, {"c", 50, stats.InputProcessing}, {"d", 10, stats.OutputGeneration}, {"e", 10, stats.OutputGeneration}},
			stats.EngineMetrics{HasLoad: true, Running: 3, Waiting: 1, MeanPromptTokens: 345.2},
			published{5, 3, 250, 270},
		},
		{
			"other clients queue at the engine; no engine mean: the pylon's own mean prices them",
			[]own{{"a", 100, stats.Pending}},
			stats.EngineMetrics{HasLoad: true, Running: 8, Waiting: 4},
			published{8, 4, 400, 400},
		},
		{"no mean known at all: the queue counts, its work cannot", nil, stats.EngineMetrics{HasLoad: true, Running: 1, Waiting: 4}, published{1, 4, 0, 0}},
		{
			"shared engine (multi-backend cluster): queue fields stay the pylon's own",
			[]own{{"a", 100, stats.Pending}},
			stats.EngineMetrics{HasLoad: true, Running: 3, Waiting: 2, MeanPromptTokens: 345.2, Shared: true},
			published{3, 1, 100, 100},
		},
		{
			"no counts exported",
			[]own{{"a", 100, stats.Pending}},
			stats.EngineMetrics{Running: 30, Waiting: 20, KVUsage: 0.5},
			published{1, 1, 100, 100},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := stats.NewAggregate("m", 1, stats.Options{})
			for _, r := range tt.own {
				a.Admit(r.id, 0, r.tokens, 0, false, off, t0)
				if r.phase >= stats.InputProcessing {
					a.ResponseStarted(r.id)
				}
				if r.phase == stats.OutputGeneration {
					a.FirstOutput(r.id, t0)
				}
			}
			e := tt.engine
			e.KVUsage = math.NaN()
			a.Apply(&stats.Update{Generation: 1, Metrics: &e}, t0)
			l := a.Load(t0.Add(time.Second))
			if diff := cmp.Diff(tt.want, publishedOf(&l)); diff != "" {
				t.Errorf("published (-want +got):\n%s", diff)
			}
		})
	}
}

// The engine's view leaves the published load once older than EngineViewTTL (Sweep
// reports the change), and its waiting work is queued ahead of every priority.
func TestEngineViewExpiresAndQueuesAhead(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{InitialInputTPS: 1000})
	a.Admit("p5", 5, 100, 0, false, off, t0)
	m := stats.EngineMetrics{HasLoad: true, Running: 4, Waiting: 3, MeanPromptTokens: 500, KVUsage: math.NaN()}
	a.Apply(&stats.Update{Generation: 1, Metrics: &m}, t0)
	l := a.Load(t0)
	// 2 waiting requests beyond the pylon's own at 500 tokens: 1000 tokens ahead of p5's 100.
	if diff := cmp.Diff([]load.PriorityEstimate{{Priority: 0, QueueMs: 1000}, {Priority: 5, QueueMs: 1100}}, l.QueueEstimates); diff != "" {
		t.Errorf("queue estimates (-want +got):\n%s", diff)
	}
	if r, w, ok := a.EngineLoad(t0); r != 4 || w != 3 || !ok {
		t.Errorf("engine load %d %d %v", r, w, ok)
	}
	if a.Sweep(t0.Add(stats.EngineViewTTL - time.Millisecond)) {
		t.Error("a fresh engine view was swept")
	}
	if !a.Sweep(t0.Add(stats.EngineViewTTL)) {
		t.Error("the stale engine view was not swept")
	}
	l = a.Load(t0.Add(stats.EngineViewTTL))
	if got := publishedOf(&l); got != (published{1, 1, 100, 100}) {
		t.Errorf("after the engine view expired: %+v, want the pylon's own", got)
	}
	if _, _, ok := a.EngineLoad(t0.Add(stats.EngineViewTTL)); ok {
		t.Error("EngineLoad still reports the stale view")
	}
}

// KV figures: the capacity is kept when a scrape lacks it, usage is clamped to it; the
// counter rates the scraper hands over feed the throughputs unless the engine is shared.
func TestEngineMetricsKVAndRates(t *testing.T) {
	t.Parallel()
	a := stats.NewAggregate("m", 1, stats.Options{})
	apply := func(m stats.EngineMetrics, at time.Time) {
		a.Apply(&stats.Update{Generation: 1, Metrics: &m}, at)
	}
	apply(stats.EngineMetrics{KVUsage: 0.25, KVCapacityTokens: 37440, GenerationTPS: 80}, t0)
	apply(stats.EngineMetrics{KVUsage: 0.5, GenerationTPS: 120}, t0.Add(time.Second))
	l := a.Load(t0.Add(time.Second))
	if l.KVCapacityTokens != 37440 || l.KVUsedTokens != 18720 || l.KVFreeTokens != 18720 || l.OutputTPS != 100 {
		t.Errorf("kv %d/%d/%d output %v", l.KVCapacityTokens, l.KVUsedTokens, l.KVFreeTokens, l.OutputTPS)
	}
	apply(stats.EngineMetrics{KVUsage: 7, PromptTPS: 5000}, t0.Add(2*time.Second))
	l = a.Load(t0.Add(2 * time.Second))
	if l.KVUsedTokens != 37440 || l.KVFreeTokens != 0 || a.Input().Count() != 1 {
		t.Errorf("usage above 1: used %d free %d; input samples %d", l.KVUsedTokens, l.KVFreeTokens, a.Input().Count())
	}
	apply(stats.EngineMetrics{KVUsage: math.NaN(), GenerationTPS: 1e6, PromptTPS: 1e6, Shared: true}, t0.Add(3*time.Second))
	l = a.Load(t0.Add(3 * time.Second))
	if l.OutputTPS != 100 || a.Input().Count() != 1 || l.KVUsedTokens != 37440 {
		t.Errorf("a shared engine's rates were used: output %v input samples %d", l.OutputTPS, a.Input().Count())
	}
}

// Publishing with a fresh engine view allocates nothing either.
func TestLoadIntoWithEngineViewAllocatesNothing(t *testing.T) {
	a := stats.NewAggregate("m", 1, stats.Options{InitialInputTPS: 1000})
	a.Admit("r", 3, 100, 0, false, off, t0)
	m := stats.EngineMetrics{HasLoad: true, Running: 4, Waiting: 3, MeanPromptTokens: 500, KVUsage: 0.5, KVCapacityTokens: 1000}
	a.Apply(&stats.Update{Generation: 1, Metrics: &m}, t0)
	var l load.Load
	buf := make([]load.PriorityEstimate, 0, 4)
	if n := testing.AllocsPerRun(100, func() { a.LoadInto(&l, t0, buf) }); n != 0 {
		t.Errorf("%.1f allocations per LoadInto, want 0", n)
	}
}

package latency_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/latency"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// run advances b to completion, returning all events.
func run(tb testing.TB, b *latency.Batched) []latency.Event {
	tb.Helper()
	var evs []latency.Event
	for range 10_000_000 {
		at, ok := b.Next()
		if !ok {
			return evs
		}
		evs = b.Advance(at, evs)
	}
	tb.Fatal("model did not go idle")
	return nil
}

func TestBatchedDecodeRateAt25Seqs(t *testing.T) {
	t.Parallel()
	b := latency.NewBatched(latency.BatchedConfig{})
	const seqs, out = 25, 1001
	for i := range seqs {
		b.Submit(t0, latency.Seq{ID: uint64(i), PrefillTokens: 1, OutputTokens: out})
	}
	evs := run(t, b)
	first := map[uint64]time.Time{}
	last := map[uint64]time.Time{}
	for _, e := range evs {
		if e.Kind == latency.FirstToken {
			first[e.ID] = e.At
		}
		if e.Finished {
			last[e.ID] = e.At
		}
	}
	for i := range uint64(seqs) {
		rate := float64(out-1) / last[i].Sub(first[i]).Seconds()
		if rate < 160 || rate > 166 {
			t.Fatalf("seq %d decodes at %.1f tok/s, want ≈163", i, rate)
		}
		if i == 0 {
			t.Logf("decode rate per sequence at %d sequences: %.2f tok/s", seqs, rate)
		}
	}
}

func TestBatchedPrefillRatePerWorker(t *testing.T) {
	t.Parallel()
	b := latency.NewBatched(latency.BatchedConfig{})
	const prompts, promptTokens = 20, 8000
	for i := range prompts {
		b.Submit(t0, latency.Seq{ID: uint64(i), PrefillTokens: promptTokens, OutputTokens: 1})
	}
	evs := run(t, b)
	end := evs[len(evs)-1].At
	rate := float64(prompts*promptTokens) / end.Sub(t0).Seconds()
	t.Logf("prefill rate per worker, %d concurrent prompts of %d tokens: %.0f tok/s", prompts, promptTokens, rate)
	if rate < 19000 || rate > 20000 {
		t.Fatalf("prefill rate %.0f tok/s, want ≈20000 (19248 with the 4 ms step overhead)", rate)
	}
}

func TestBatchedExactSmallTimeline(t *testing.T) {
	t.Parallel()
	b := latency.NewBatched(latency.BatchedConfig{MaxNumSeqs: 2, MaxBatchedTokens: 100})
	b.Submit(t0, latency.Seq{ID: 1, PrefillTokens: 150, OutputTokens: 2})
	b.Submit(t0, latency.Seq{ID: 2, PrefillTokens: 10, OutputTokens: 1})
	b.Submit(t0, latency.Seq{ID: 3, PrefillTokens: 10, OutputTokens: 1}) // waits for a slot
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	// step 1: seq1 prefills 100 → 4+5 = 9 ms.
	// step 2: seq1 prefills 50, seq2 prefills 10 → 4+3 = 7 ms → 16: both first tokens; seq2 done.
	// step 3: seq1 decodes 1, seq3 prefills 10 → 4+0.085+0.5 = 4.585 → 20.585: seq1 done, seq3 done.
	want := []latency.Event{
		{ID: 1, Kind: latency.FirstToken, Generated: 1, At: ms(16)},
		{ID: 2, Kind: latency.FirstToken, Generated: 1, Finished: true, At: ms(16)},
		{ID: 1, Kind: latency.Token, Generated: 2, Finished: true, At: ms(20.585)},
		{ID: 3, Kind: latency.FirstToken, Generated: 1, Finished: true, At: ms(20.585)},
	}
	if diff := cmp.Diff(want, run(t, b)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestBatchedPickAndCancel(t *testing.T) {
	t.Parallel()
	b := latency.NewBatched(latency.BatchedConfig{Workers: 3})
	if got := b.Pick([]uint64{0, 500, 100}); got != 1 {
		t.Fatalf("Pick by cache = %d, want 1", got)
	}
	b.Submit(t0, latency.Seq{ID: 1, Worker: 0, PrefillTokens: 10, OutputTokens: 5})
	b.Submit(t0, latency.Seq{ID: 2, Worker: 1, PrefillTokens: 10, OutputTokens: 5})
	if got := b.Pick(nil); got != 2 {
		t.Fatalf("Pick least loaded = %d, want 2", got)
	}
	b.Cancel(1)
	for _, e := range run(t, b) {
		if e.ID == 1 {
			t.Fatalf("cancelled sequence produced %+v", e)
		}
	}
	if r, w := b.Load(); r != 0 || w != 0 {
		t.Fatalf("load after completion = %d running, %d waiting", r, w)
	}
}

// Every sequence produces exactly its output tokens, in order, with non-decreasing times,
// and running sequences never exceed MaxNumSeqs.
func TestBatchedProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cfg := latency.BatchedConfig{
			Workers:          rapid.IntRange(1, 3).Draw(t, "workers"),
			MaxNumSeqs:       rapid.IntRange(1, 8).Draw(t, "max_num_seqs"),
			MaxBatchedTokens: rapid.IntRange(9, 300).Draw(t, "max_batched_tokens"),
		}
		b := latency.NewBatched(cfg)
		n := rapid.IntRange(1, 30).Draw(t, "n")
		outs := map[uint64]int{}
		now := t0
		var evs []latency.Event
		for i := range n {
			now = now.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "gap_ms")) * time.Millisecond)
			evs = b.Advance(now, evs)
			out := rapid.IntRange(1, 20).Draw(t, "out")
			outs[uint64(i)] = out
			b.Submit(now, latency.Seq{ID: uint64(i), Worker: b.Pick(nil), PrefillTokens: rapid.IntRange(0, 500).Draw(t, "prefill"), OutputTokens: out})
			if r, _ := b.Load(); r > cfg.Workers*cfg.MaxNumSeqs {
				t.Fatalf("%d running > %d", r, cfg.Workers*cfg.MaxNumSeqs)
			}
		}
		for {
			at, ok := b.Next()
			if !ok {
				break
			}
			evs = b.Advance(at, evs)
		}
		got := map[uint64]int{}
		lastAt := map[uint64]time.Time{}
		for _, e := range evs {
			got[e.ID]++
			if e.Generated != got[e.ID] {
				t.Fatalf("seq %d event %d has Generated %d", e.ID, got[e.ID], e.Generated)
			}
			if e.At.Before(lastAt[e.ID]) {
				t.Fatalf("seq %d time went backwards", e.ID)
			}
			lastAt[e.ID] = e.At
			if e.Finished != (e.Generated == outs[e.ID]) {
				t.Fatalf("seq %d finished=%v at %d of %d", e.ID, e.Finished, e.Generated, outs[e.ID])
			}
		}
		if diff := cmp.Diff(outs, got); diff != "" {
			t.Fatalf("tokens per seq (-want +got):\n%s", diff)
		}
	})
}

func TestBatchedConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (latency.BatchedConfig{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	if err := (latency.BatchedConfig{Workers: -1, MaxNumSeqs: 30, MaxBatchedTokens: 20}).Validate(); err == nil {
		t.Fatal("bad config accepted")
	}
}

package lbconfig

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
)

// TestDefaultEntry checks every algorithm's defaults: sample_count 2, comparator ttft for
// power-of-n and wait-and-widen only, and wait-and-widen's internal defaults (virtual nodes
// 150, scale 1, bucket 20 ms, unlock factor 0.25, n 2).
func TestDefaultEntry(t *testing.T) {
	t.Parallel()
	waw := Entry{
		Algorithm:          WaitAndWiden,
		Name:               "wait-and-widen",
		Comparator:         load.ComparatorTTFT,
		VirtualNodes:       150,
		AffinityInputScale: 1.0,
		BucketSize:         20 * time.Millisecond,
		UnlockFactor:       0.25,
		N:                  2,
		TieTolerance:       20 * time.Millisecond,
		SessionTTL:         5 * time.Minute,
		SessionTableSize:   65536,
		PrefixIndexBlocks:  16384,
		PrefixIndexTTL:     10 * time.Minute,
		TTFTCorrection:     true,
		PrefillWait:        true,
	}
	pwaw := waw
	pwaw.Algorithm, pwaw.Name, pwaw.Comparator, pwaw.TieTolerance = PulsarWaitAndWiden, "pulsar-wait-and-widen", load.ComparatorNone, 0
	pwaw.SessionTTL, pwaw.SessionTableSize, pwaw.PrefixIndexBlocks, pwaw.PrefixIndexTTL = 0, 0, 0, 0
	want := []Entry{
		{Algorithm: PowerOfN, Name: "power-of-n", SampleCount: 2, Comparator: load.ComparatorTTFT, TieTolerance: 20 * time.Millisecond, TTFTCorrection: true},
		waw,
		{Algorithm: RoundRobin, Name: "round-robin"},
		{Algorithm: Random, Name: "random"},
		{Algorithm: Pulsar, Name: "pulsar", PrefillWait: true},
		pwaw,
	}
	got := make([]Entry, 0, len(want))
	for _, a := range Algorithms() {
		e := DefaultEntry(a)
		if err := e.Validate(); err != nil {
			t.Errorf("DefaultEntry(%v).Validate() = %v", a, err)
		}
		got = append(got, e)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// TestEntryValidate checks the range checks on entries built in code: sample_count 1–64,
// the affinity scale within 0–1 (NaN and ±Inf rejected without a panic), and no
// comparator, affinity hold or scale on pulsar-wait-and-widen.
func TestEntryValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		entry Entry
		want  []string // nil: valid
	}{
		{"sample_count 1", with(PowerOfN, func(e *Entry) { e.SampleCount = 1 }), nil},
		{"sample_count 64", with(PowerOfN, func(e *Entry) { e.SampleCount = 64 }), nil},
		{"sample_count 0", with(PowerOfN, func(e *Entry) { e.SampleCount = 0 }), []string{"power-of-n sample_count must be between 1 and 64"}},
		{"sample_count 65", with(PowerOfN, func(e *Entry) { e.SampleCount = 65 }), []string{"power-of-n sample_count must be between 1 and 64"}},
		{"sample_count -1", with(PowerOfN, func(e *Entry) { e.SampleCount = -1 }), []string{"power-of-n sample_count must be between 1 and 64"}},
		{"sample_count ignored on wait-and-widen", with(WaitAndWiden, func(e *Entry) { e.SampleCount = 1000 }), nil},
		{"scale 0", with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = 0 }), nil},
		{"scale 1", with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = 1 }), nil},
		{"scale -0.1", with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = -0.1 }), []string{"cache_affinity_input_tokens_scale must be between 0.0 and 1.0"}},
		{"scale 1.1", with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = 1.1 }), []string{"cache_affinity_input_tokens_scale must be between 0.0 and 1.0"}},
		{"scale NaN", with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = math.NaN() }), []string{"cache_affinity_input_tokens_scale must be between 0.0 and 1.0"}},
		{"scale +Inf", with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = math.Inf(1) }), []string{"cache_affinity_input_tokens_scale must be between 0.0 and 1.0"}},
		{"scale -Inf", with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = math.Inf(-1) }), []string{"cache_affinity_input_tokens_scale must be between 0.0 and 1.0"}},
		{"pulsar-wait-and-widen comparator", with(PulsarWaitAndWiden, func(e *Entry) { e.Comparator = load.ComparatorTTFT }), []string{"comparator is not supported for pulsar-wait-and-widen"}},
		{"pulsar-wait-and-widen X, scale and widening", with(PulsarWaitAndWiden, func(e *Entry) {
			e.AffinityWait, e.AffinityInputScale, e.HasBandWiden, e.BandWiden, e.FallbackMaxQueued = time.Millisecond, 0.5, true, 0, 2
		}), nil},
		{"pulsar-wait-and-widen negative widening", with(PulsarWaitAndWiden, func(e *Entry) { e.HasBandWiden, e.BandWiden = true, -1 }), []string{"band_widen_interval_ms must not be negative"}},
		{"widening on wait-and-widen", with(WaitAndWiden, func(e *Entry) { e.FallbackMaxQueued = 1 }), []string{"band_widen_interval_ms and fallback_max_queued are only supported for pulsar-wait-and-widen"}},
		{"rendezvous weight on power-of-n", with(PowerOfN, func(e *Entry) { e.RendezvousWeight = WeightLastMeanInputTPS }), []string{"rendezvous_weight is not supported for power-of-n"}},
		{"rendezvous weight out of range", with(Pulsar, func(e *Entry) { e.RendezvousWeight = 9 }), []string{"rendezvous_weight must be max-input-tps or last-mean-input-tps"}},
		{"pulsar-wait-and-widen scale out of range", with(PulsarWaitAndWiden, func(e *Entry) { e.AffinityInputScale = 2 }), []string{"cache_affinity_input_tokens_scale must be between 0.0 and 1.0"}},
		{"pulsar-wait-and-widen ignores virtual nodes", with(PulsarWaitAndWiden, func(e *Entry) { e.VirtualNodes = 0 }), nil},
		{"pulsar-wait-and-widen kv", with(PulsarWaitAndWiden, func(e *Entry) { e.ConsiderKVFreeTokens = true }), nil},
		{"comparator on round-robin", with(RoundRobin, func(e *Entry) { e.Comparator = load.ComparatorUtilization }), []string{"comparator is not supported for round-robin"}},
		{"no comparator on power-of-n", with(PowerOfN, func(e *Entry) { e.Comparator = load.ComparatorNone }), []string{"power-of-n comparator must be one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued (got none)"}},
		{"bad comparator on wait-and-widen", with(WaitAndWiden, func(e *Entry) { e.Comparator = 99 }), []string{"wait-and-widen comparator must be one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued (got comparator(99))"}},
		{"seed on random", with(Random, func(e *Entry) { e.Seed = "s" }), []string{"seed is not supported for random"}},
		{"seed on pulsar", with(Pulsar, func(e *Entry) { e.Seed = "s" }), nil},
		{"kv on wait-and-widen", with(WaitAndWiden, func(e *Entry) { e.ConsiderKVFreeTokens = true }), []string{"consider_kv_free_tokens is not supported for wait-and-widen"}},
		{"kv on pulsar", with(Pulsar, func(e *Entry) { e.ConsiderKVFreeTokens = true }), nil},
		{"ttft correction on pulsar", with(Pulsar, func(e *Entry) { e.TTFTCorrection = true }), []string{"ttft_correction is not supported for pulsar, which does not estimate TTFT"}},
		{"ttft correction off on wait-and-widen", with(WaitAndWiden, func(e *Entry) { e.TTFTCorrection = false }), nil},
		{"max input work NaN", with(Random, func(e *Entry) { e.MaxInputWorkSeconds, e.HasMaxInputWork = math.NaN(), true }), []string{"max_input_work_seconds must be a number, not NaN"}},
		{"max input work NaN unset", with(Random, func(e *Entry) { e.MaxInputWorkSeconds = math.NaN() }), nil},
		{"max input work negative", with(Random, func(e *Entry) { e.MaxInputWorkSeconds, e.HasMaxInputWork = -1, true }), nil},
		{"max input work +Inf", with(Random, func(e *Entry) { e.MaxInputWorkSeconds, e.HasMaxInputWork = math.Inf(1), true }), nil},
		{"unlock factor negative", with(WaitAndWiden, func(e *Entry) { e.UnlockFactor = -3 }), nil},
		{"unlock factor NaN", with(WaitAndWiden, func(e *Entry) { e.UnlockFactor = math.NaN() }), []string{"next_bucket_unlock_factor must be a finite number"}},
		{"unlock factor Inf", with(PulsarWaitAndWiden, func(e *Entry) { e.UnlockFactor = math.Inf(1) }), []string{"next_bucket_unlock_factor must be a finite number"}},
		{"n 0", with(WaitAndWiden, func(e *Entry) { e.N = 0 }), []string{"n must be at least 1"}},
		{"virtual nodes 0", with(WaitAndWiden, func(e *Entry) { e.VirtualNodes = 0 }), []string{"cache_affinity_virtual_nodes must be between 1 and 65536"}},
		{"virtual nodes too many", with(WaitAndWiden, func(e *Entry) { e.VirtualNodes = MaxVirtualNodes + 1 }), []string{"cache_affinity_virtual_nodes must be between 1 and 65536"}},
		{"negative numbers", with(WaitAndWiden, func(e *Entry) {
			e.SelectionCount, e.AffinityWait, e.BucketSize = -1, -1, -1
			e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, -1, -1
		}), []string{
			"cache_affinity_backend_selection_count must not be negative",
			"cache_affinity_wait_ms must not be negative",
			"max_queue_time_floor_ms must not be negative",
			"max_queue_time_ceil_ms must not be negative",
			"ttft_bucket_size_ms must not be negative",
		}},
		{"floor above ceil is kept", with(WaitAndWiden, func(e *Entry) { e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, time.Second, time.Millisecond }), nil},
		{"unknown algorithm", Entry{Algorithm: 6}, []string{"unknown algorithm algorithm(6)"}},
		{"several problems", with(PulsarWaitAndWiden, func(e *Entry) {
			e.Comparator, e.AffinityWait, e.N = load.ComparatorQueueTime, time.Second, 0
		}), []string{
			"comparator is not supported for pulsar-wait-and-widen",
			"n must be at least 1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, problems(tt.entry.Validate())); diff != "" {
				t.Errorf("Validate() problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSameSettings(t *testing.T) {
	t.Parallel()
	a := named(WaitAndWiden, "groq-multiregion")
	b := DefaultEntry(WaitAndWiden)
	if !a.SameSettings(b) || !b.SameSettings(a) {
		t.Errorf("entries differing only in Name should have the same settings")
	}
	c := with(WaitAndWiden, func(e *Entry) { e.Seed = "x" })
	if b.SameSettings(c) {
		t.Errorf("entries with different seeds should not have the same settings")
	}
	if DefaultEntry(Pulsar).SameSettings(DefaultEntry(Random)) {
		t.Errorf("different algorithms should not have the same settings")
	}
}

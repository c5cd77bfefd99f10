package lbconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const wantOneOf = " (want one of power-of-n, wait-and-widen, round-robin, random, pulsar, pulsar-wait-and-widen)"

func TestAlgorithmString(t *testing.T) {
	t.Parallel()
	got := make([]string, 0, len(Algorithms())+1)
	for _, a := range Algorithms() {
		got = append(got, a.String())
	}
	got = append(got, Algorithm(6).String())
	want := []string{
		"power-of-n", "wait-and-widen", "round-robin", "random", "pulsar", "pulsar-wait-and-widen",
		"algorithm(6)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

func TestAlgorithms(t *testing.T) {
	t.Parallel()
	want := []Algorithm{PowerOfN, WaitAndWiden, RoundRobin, Random, Pulsar, PulsarWaitAndWiden}
	if diff := cmp.Diff(want, Algorithms()); diff != "" {
		t.Errorf("Algorithms() (-want +got):\n%s", diff)
	}
}

func TestParseAlgorithm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want Algorithm
	}{
		{"power-of-n", PowerOfN},
		{"wait-and-widen", WaitAndWiden},
		{"round-robin", RoundRobin},
		{"random", Random},
		{"pulsar", Pulsar},
		{"pulsar-wait-and-widen", PulsarWaitAndWiden},
		{"power-of-two", PowerOfN},
		{"powerOf2", PowerOfN},
		{"powerOfN", PowerOfN},
		{"powerof2", PowerOfN},
		{"powerofn", PowerOfN},
		{"groq-multiregion", WaitAndWiden},
		{"pulsar-multiregion", PulsarWaitAndWiden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseAlgorithm(tt.name)
			if err != nil {
				t.Fatalf("ParseAlgorithm(%q): %v", tt.name, err)
			}
			if got != tt.want {
				t.Errorf("ParseAlgorithm(%q) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

func TestParseAlgorithmUnknown(t *testing.T) {
	t.Parallel()
	// Config names are exact: header spellings are not accepted in the file.
	for _, name := range []string{"", "sticky", "Power-Of-N", "round_robin", " random", "POWEROF2", "none"} {
		_, err := ParseAlgorithm(name)
		if !errors.Is(err, ErrUnknownAlgorithm) {
			t.Errorf("ParseAlgorithm(%q) error = %v, want ErrUnknownAlgorithm", name, err)
			continue
		}
		want := "unknown algorithm " + quote(name) + wantOneOf
		if diff := cmp.Diff(want, err.Error()); diff != "" {
			t.Errorf("ParseAlgorithm(%q) message (-want +got):\n%s", name, diff)
		}
	}
}

// TestParseRoutingMethod checks the names the header parser accepts: every canonical name,
// its underscore spelling, any capitalisation and surrounding white space, the aliases and
// the legacy names, each reported in its normalised spelling.
func TestParseRoutingMethod(t *testing.T) {
	t.Parallel()
	type result struct {
		Algorithm Algorithm
		Name      string
	}
	tests := []struct {
		header string
		want   result
	}{
		{"power-of-n", result{PowerOfN, "power-of-n"}},
		{"power_of_n", result{PowerOfN, "power-of-n"}},
		{"wait-and-widen", result{WaitAndWiden, "wait-and-widen"}},
		{"wait_and_widen", result{WaitAndWiden, "wait-and-widen"}},
		{"round-robin", result{RoundRobin, "round-robin"}},
		{"round_robin", result{RoundRobin, "round-robin"}},
		{"random", result{Random, "random"}},
		{"pulsar", result{Pulsar, "pulsar"}},
		{"pulsar-wait-and-widen", result{PulsarWaitAndWiden, "pulsar-wait-and-widen"}},
		{"pulsar_wait_and_widen", result{PulsarWaitAndWiden, "pulsar-wait-and-widen"}},
		{" PowerOf2 ", result{PowerOfN, "powerof2"}},
		{"powerOfN", result{PowerOfN, "powerofn"}},
		{"POWER_OF_TWO", result{PowerOfN, "power-of-two"}},
		{"\tRandom\r\n", result{Random, "random"}},
		{"groq-multiregion", result{WaitAndWiden, "groq-multiregion"}},
		{"groq_multiregion", result{WaitAndWiden, "groq-multiregion"}},
		{"Pulsar_MultiRegion", result{PulsarWaitAndWiden, "pulsar-multiregion"}},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			t.Parallel()
			a, name, err := ParseRoutingMethod(tt.header)
			if err != nil {
				t.Fatalf("ParseRoutingMethod(%q): %v", tt.header, err)
			}
			if diff := cmp.Diff(tt.want, result{a, name}); diff != "" {
				t.Errorf("ParseRoutingMethod(%q) (-want +got):\n%s", tt.header, diff)
			}
		})
	}
}

func TestParseRoutingMethodRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header  string
		want    HeaderError
		wantMsg string
	}{
		{"", HeaderError{Value: "", Reason: ReasonBlank}, "x-routing-method is blank"},
		{" \t ", HeaderError{Value: " \t ", Reason: ReasonBlank}, "x-routing-method is blank"},
		{"sticky", HeaderError{Value: "sticky", Name: "sticky", Reason: ReasonUnknown}, `x-routing-method "sticky": unknown algorithm`},
		{"Sticky_Session", HeaderError{Value: "Sticky_Session", Name: "sticky-session", Reason: ReasonUnknown}, `x-routing-method "Sticky_Session": unknown algorithm`},
		{"random;x=1", HeaderError{Value: "random;x=1", Name: "random;x=1", Reason: ReasonUnknown}, `x-routing-method "random;x=1": unknown algorithm`},
		{"rand\xffom", HeaderError{Value: "rand\xffom", Reason: ReasonInvalidUTF8}, `x-routing-method "rand\xffom" is not valid UTF-8`},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			t.Parallel()
			_, _, err := ParseRoutingMethod(tt.header)
			if !errors.Is(err, ErrUnknownAlgorithm) || errors.Is(err, ErrUnavailableAlgorithm) {
				t.Fatalf("ParseRoutingMethod(%q) error = %v, want ErrUnknownAlgorithm only", tt.header, err)
			}
			var he *HeaderError
			if !errors.As(err, &he) {
				t.Fatalf("ParseRoutingMethod(%q) error %T is not a *HeaderError", tt.header, err)
			}
			if diff := cmp.Diff(tt.want, *he); diff != "" {
				t.Errorf("HeaderError (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantMsg, err.Error()); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFields(t *testing.T) {
	t.Parallel()
	common := "algorithm max_input_work_seconds request_algorithms require_cache_affinity_key require_input_tokens"
	tests := []struct {
		a    Algorithm
		want string
	}{
		{PowerOfN, "algorithm comparator max_input_work_seconds request_algorithms require_cache_affinity_key require_input_tokens sample_count tie_tolerance_ms ttft_correction"},
		{RoundRobin, common},
		{Random, common},
		{Pulsar, "algorithm consider_kv_free_tokens max_input_work_seconds prefill_wait rendezvous_weight request_algorithms require_cache_affinity_key require_input_tokens seed"},
		{WaitAndWiden, "algorithm cache_affinity_backend_selection_count cache_affinity_input_tokens_scale cache_affinity_virtual_nodes " +
			"cache_affinity_wait_ms capacity_wait_ms capacity_wait_order comparator ignore_input_processing_time ignore_queue_time last_cluster_affinity max_input_work_seconds max_queue_time_ceil_ms " +
			"max_queue_time_floor_ms max_queued n next_bucket_unlock_factor prefill_wait prefix_affinity prefix_index_blocks prefix_index_ttl_ms request_algorithms require_cache_affinity_key " +
			"require_input_tokens seed session_affinity_ttl_ms session_table_size tie_tolerance_ms ttft_bucket_size_ms ttft_correction"},
		{PulsarWaitAndWiden, "algorithm band_widen_interval_ms cache_affinity_backend_selection_count cache_affinity_input_tokens_scale cache_affinity_virtual_nodes " +
			"cache_affinity_wait_ms capacity_wait_ms capacity_wait_order comparator consider_kv_free_tokens fallback_max_queued ignore_input_processing_time ignore_queue_time last_cluster_affinity max_input_work_seconds " +
			"max_queue_time_ceil_ms max_queue_time_floor_ms max_queued n next_bucket_unlock_factor prefill_wait rendezvous_weight request_algorithms " +
			"require_cache_affinity_key require_input_tokens seed ttft_bucket_size_ms ttft_correction"},
		{Algorithm(42), ""},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, strings.Join(Fields(tt.a), " ")); diff != "" {
			t.Errorf("Fields(%v) (-want +got):\n%s", tt.a, diff)
		}
	}
}

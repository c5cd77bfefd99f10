package lbconfig

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
)

// config builds an explicit (non-permissive) Config for expectations.
func config(def Entry, overrides map[Algorithm]Entry, models map[string]Model) *Config {
	return &Config{Default: def, RequestAlgorithms: overrides, Models: models}
}

// referenceExample is the lb-config.json example of the reference router's documentation.
const referenceExample = `{
  "default": "power-of-n",
  "request_algorithms": {
    "wait-and-widen": "wait-and-widen",
    "pulsar": {"algorithm": "pulsar", "seed": "request-routing-v1", "require_cache_affinity_key": true}
  },
  "models": {
    "model-a": {
      "algorithm": "wait-and-widen",
      "require_cache_affinity_key": true,
      "cache_affinity_backend_selection_count": 2,
      "cache_affinity_wait_ms": 200,
      "cache_affinity_input_tokens_scale": 0.1
    }
  }
}`

// TestParse covers accepted documents: short and detailed entries of every algorithm,
// defaults and normalisations, aliases and legacy names (spelling kept), the wait-and-widen
// affinity fields, the bounds of the affinity scale, and the reference router's example.
func TestParse(t *testing.T) {
	t.Parallel()
	pon := DefaultEntry(PowerOfN)
	tests := []struct {
		name string
		doc  string
		want *Config
	}{
		{
			name: "empty object",
			doc:  `{}`,
			want: config(pon, nil, nil),
		},
		{
			name: "short names",
			doc:  `{"default":"wait-and-widen","models":{"model-a":"round-robin"}}`,
			want: config(DefaultEntry(WaitAndWiden), nil, map[string]Model{"model-a": {Entry: DefaultEntry(RoundRobin)}}),
		},
		{
			name: "max_input_work_seconds",
			doc:  `{"models":{"model-a":{"algorithm":"round-robin","max_input_work_seconds":2.5}}}`,
			want: config(pon, nil, map[string]Model{"model-a": {Entry: with(RoundRobin, func(e *Entry) {
				e.MaxInputWorkSeconds, e.HasMaxInputWork = 2.5, true
			})}}),
		},
		{
			name: "max_input_work_seconds is not range-checked",
			doc:  `{"models":{"m":{"algorithm":"random","max_input_work_seconds":-1e300}}}`,
			want: config(pon, nil, map[string]Model{"m": {Entry: with(Random, func(e *Entry) {
				e.MaxInputWorkSeconds, e.HasMaxInputWork = -1e300, true
			})}}),
		},
		{
			name: "power-of-n detailed defaults",
			doc:  `{"models":{"m":{"algorithm":"power-of-n"}}}`,
			want: config(pon, nil, map[string]Model{"m": {Entry: pon}}),
		},
		{
			name: "power-of-n bounds",
			doc:  `{"models":{"one":{"algorithm":"power-of-n","sample_count":1},"max":{"algorithm":"power-of-n","sample_count":64,"comparator":"utilization"}}}`,
			want: config(pon, nil, map[string]Model{
				"one": {Entry: with(PowerOfN, func(e *Entry) { e.SampleCount = 1 })},
				"max": {Entry: with(PowerOfN, func(e *Entry) { e.SampleCount, e.Comparator = 64, load.ComparatorUtilization })},
			}),
		},
		{
			name: "detailed configs of all six algorithms",
			doc: `{"models":{
				"pon":   {"algorithm":"power-of-n","sample_count":3,"comparator":"queue-time","require_input_tokens":true},
				"waw":   {"algorithm":"wait-and-widen","seed":"s-waw"},
				"rr":    {"algorithm":"round-robin","require_cache_affinity_key":true},
				"rand":  {"algorithm":"random"},
				"pul":   {"algorithm":"pulsar","seed":"s-p","consider_kv_free_tokens":true},
				"pwaw":  {"algorithm":"pulsar-wait-and-widen","seed":"s-pw","consider_kv_free_tokens":true}
			}}`,
			want: config(pon, nil, map[string]Model{
				"pon": {Entry: with(PowerOfN, func(e *Entry) {
					e.SampleCount, e.Comparator, e.RequireInputTokens = 3, load.ComparatorQueueTime, true
				})},
				"waw":  {Entry: with(WaitAndWiden, func(e *Entry) { e.Seed = "s-waw" })},
				"rr":   {Entry: with(RoundRobin, func(e *Entry) { e.RequireCacheAffinityKey = true })},
				"rand": {Entry: DefaultEntry(Random)},
				"pul":  {Entry: with(Pulsar, func(e *Entry) { e.Seed, e.ConsiderKVFreeTokens = "s-p", true })},
				"pwaw": {Entry: with(PulsarWaitAndWiden, func(e *Entry) { e.Seed, e.ConsiderKVFreeTokens = "s-pw", true })},
			}),
		},
		{
			name: "legacy names in short and detailed configs keep their spelling",
			doc: `{"default":"groq-multiregion",
				"request_algorithms":{"pulsar-multiregion":{"algorithm":"pulsar-multiregion","seed":"x"}},
				"models":{"a":"pulsar-multiregion","b":{"algorithm":"groq-multiregion","n":3}}}`,
			want: config(named(WaitAndWiden, "groq-multiregion"),
				map[Algorithm]Entry{PulsarWaitAndWiden: with(PulsarWaitAndWiden, func(e *Entry) { e.Name, e.Seed = "pulsar-multiregion", "x" })},
				map[string]Model{
					"a": {Entry: named(PulsarWaitAndWiden, "pulsar-multiregion")},
					"b": {Entry: with(WaitAndWiden, func(e *Entry) { e.Name, e.N = "groq-multiregion", 3 })},
				}),
		},
		{
			name: "power-of-n aliases",
			doc:  `{"default":"powerOf2","models":{"a":"power-of-two","b":"powerOfN","c":"powerof2","d":{"algorithm":"powerofn","sample_count":4}}}`,
			want: config(named(PowerOfN, "powerOf2"), nil, map[string]Model{
				"a": {Entry: named(PowerOfN, "power-of-two")},
				"b": {Entry: named(PowerOfN, "powerOfN")},
				"c": {Entry: named(PowerOfN, "powerof2")},
				"d": {Entry: with(PowerOfN, func(e *Entry) { e.Name, e.SampleCount = "powerofn", 4 })},
			}),
		},
		{
			name: "wait-and-widen cache-affinity fields",
			doc: `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_virtual_nodes":64,
				"cache_affinity_backend_selection_count":2,"cache_affinity_input_tokens_scale":0.1,"cache_affinity_wait_ms":200}}}`,
			want: config(pon, nil, map[string]Model{"m": {Entry: with(WaitAndWiden, func(e *Entry) {
				e.VirtualNodes, e.SelectionCount, e.AffinityInputScale, e.AffinityWait = 64, 2, 0.1, 200*time.Millisecond
			})}}),
		},
		{
			name: "scale bounds accepted",
			doc: `{"models":{"zero":{"algorithm":"wait-and-widen","cache_affinity_input_tokens_scale":0.0},
				"one":{"algorithm":"wait-and-widen","cache_affinity_input_tokens_scale":1.0},
				"pwaw":{"algorithm":"pulsar-wait-and-widen","cache_affinity_input_tokens_scale":1,"cache_affinity_wait_ms":0}}}`,
			want: config(pon, nil, map[string]Model{
				"zero": {Entry: with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = 0 })},
				"one":  {Entry: DefaultEntry(WaitAndWiden)},
				"pwaw": {Entry: DefaultEntry(PulsarWaitAndWiden)},
			}),
		},
		{
			name: "wait-and-widen normalisation",
			doc: `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_virtual_nodes":0,
				"cache_affinity_backend_selection_count":0,"n":0,"max_queue_time_floor_ms":100,"max_queue_time_ceil_ms":300}}}`,
			want: config(pon, nil, map[string]Model{"m": {Entry: with(WaitAndWiden, func(e *Entry) {
				e.VirtualNodes, e.N = 1, 1
				e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, 100*time.Millisecond, 300*time.Millisecond
			})}}),
		},
		{
			name: "queue SLO needs both bounds",
			doc: `{"models":{"floor":{"algorithm":"wait-and-widen","max_queue_time_floor_ms":100},
				"ceil":{"algorithm":"pulsar-wait-and-widen","max_queue_time_ceil_ms":300}}}`,
			want: config(pon, nil, map[string]Model{
				"floor": {Entry: with(WaitAndWiden, func(e *Entry) { e.QueueFloor = 100 * time.Millisecond })},
				"ceil":  {Entry: with(PulsarWaitAndWiden, func(e *Entry) { e.QueueCeil = 300 * time.Millisecond })},
			}),
		},
		{
			name: "every wait-and-widen field",
			doc: `{"models":{"m":{"algorithm":"wait-and-widen","comparator":"num-requests-queued","seed":"s",
				"cache_affinity_virtual_nodes":8,"cache_affinity_backend_selection_count":1,"cache_affinity_wait_ms":100,
				"cache_affinity_input_tokens_scale":0.5,"max_queue_time_floor_ms":300,"max_queue_time_ceil_ms":100,
				"ttft_bucket_size_ms":0,"next_bucket_unlock_factor":-0.5,"n":3,"max_queued":18446744073709551615,
				"ignore_queue_time":true,"ignore_input_processing_time":true,"tie_tolerance_ms":5,
				"session_affinity_ttl_ms":0,"session_table_size":10,"prefix_affinity":true,"prefix_index_blocks":64,
				"prefix_index_ttl_ms":0,"last_cluster_affinity":true,"capacity_wait_ms":250,"capacity_wait_order":"shortest","prefill_wait":false,"ttft_correction":false,
				"require_cache_affinity_key":false,"require_input_tokens":true,"max_input_work_seconds":0}}}`,
			want: config(pon, nil, map[string]Model{"m": {Entry: Entry{
				Algorithm: WaitAndWiden, Name: "wait-and-widen", RequireInputTokens: true,
				HasMaxInputWork: true, Comparator: load.ComparatorNumRequestsQueued, Seed: "s",
				VirtualNodes: 8, SelectionCount: 1, AffinityWait: 100 * time.Millisecond, AffinityInputScale: 0.5,
				HasQueueSLO: true, QueueFloor: 300 * time.Millisecond, QueueCeil: 100 * time.Millisecond,
				UnlockFactor: -0.5, N: 3, MaxQueued: math.MaxUint64, IgnoreQueueTime: true, IgnoreInputProcessingTime: true,
				TieTolerance: 5 * time.Millisecond, SessionTableSize: 10, PrefixAffinity: true, PrefixIndexBlocks: 64,
				LastClusterAffinity: true, CapacityWait: 250 * time.Millisecond, ShortestFirst: true,
			}}}),
		},
		{
			name: "durations beyond time.Duration saturate; counts beyond int saturate",
			doc: `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_wait_ms":18446744073709551615,
				"ttft_bucket_size_ms":9223372036855,"n":18446744073709551615,"cache_affinity_backend_selection_count":9223372036854775808}}}`,
			want: config(pon, nil, map[string]Model{"m": {Entry: with(WaitAndWiden, func(e *Entry) {
				e.AffinityWait, e.BucketSize = math.MaxInt64, math.MaxInt64
				e.N, e.SelectionCount = math.MaxInt, math.MaxInt
			})}}),
		},
		{
			name: "request_algorithms keys may be aliases of their algorithm",
			doc:  `{"request_algorithms":{"groq-multiregion":"wait-and-widen","power-of-n":"powerOf2","round-robin":{"algorithm":"round-robin"}}}`,
			want: config(pon, map[Algorithm]Entry{
				WaitAndWiden: DefaultEntry(WaitAndWiden),
				PowerOfN:     named(PowerOfN, "powerOf2"),
				RoundRobin:   DefaultEntry(RoundRobin),
			}, nil),
		},
		{
			name: "model-level request_algorithms are kept",
			doc: `{"request_algorithms":{"random":"random"},
				"models":{"m":{"algorithm":"pulsar","request_algorithms":{"random":{"algorithm":"random","max_input_work_seconds":1},"pulsar":"pulsar"}}}}`,
			want: config(pon, map[Algorithm]Entry{Random: DefaultEntry(Random)}, map[string]Model{"m": {
				Entry: DefaultEntry(Pulsar),
				RequestAlgorithms: map[Algorithm]Entry{
					Random: with(Random, func(e *Entry) { e.MaxInputWorkSeconds, e.HasMaxInputWork = 1, true }),
					Pulsar: DefaultEntry(Pulsar),
				},
			}}),
		},
		{
			name: "nested request_algorithms inside override entries are parsed then discarded",
			doc: `{"request_algorithms":{"random":{"algorithm":"random","request_algorithms":{"pulsar":"round-robin"}}},
				"models":{"m":{"algorithm":"pulsar","request_algorithms":{"random":{"algorithm":"random",
					"request_algorithms":{"power-of-n":{"algorithm":"power-of-n","sample_count":0}}}}}}}`,
			want: config(pon, map[Algorithm]Entry{Random: DefaultEntry(Random)}, map[string]Model{"m": {
				Entry:             DefaultEntry(Pulsar),
				RequestAlgorithms: map[Algorithm]Entry{Random: DefaultEntry(Random)},
			}}),
		},
		{
			name: "empty model id and white space",
			doc:  " \n\t{ \"models\" : { \"\" : \"random\" } }\n ",
			want: config(pon, nil, map[string]Model{"": {Entry: DefaultEntry(Random)}}),
		},
		{
			name: "the reference router's documented example",
			doc:  referenceExample,
			want: config(pon, map[Algorithm]Entry{
				WaitAndWiden: DefaultEntry(WaitAndWiden),
				Pulsar:       with(Pulsar, func(e *Entry) { e.Seed, e.RequireCacheAffinityKey = "request-routing-v1", true }),
			}, map[string]Model{"model-a": {Entry: with(WaitAndWiden, func(e *Entry) {
				e.RequireCacheAffinityKey, e.SelectionCount = true, 2
				e.AffinityWait, e.AffinityInputScale = 200*time.Millisecond, 0.1
			})}}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := mustParse(t, tt.doc)
			if diff := cmp.Diff(tt.want, got, equateEmpty); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("parsed config does not validate: %v", err)
			}
		})
	}
}

// TestParseErrors covers rejected documents: unknown algorithms and fields, fields of
// another algorithm, out-of-range settings, a comparator on pulsar-wait-and-widen,
// request_algorithms keys that do not match their entry, and the strictness rules
// (duplicate keys, nulls, wrong types). Each want line is one problem, in document order.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	_, unknownComparator := load.ParseComparator("fastest")
	_, noneComparator := load.ParseComparator("none")
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"unknown default", `{"default":"sticky"}`, []string{`default: unknown algorithm "sticky"` + wantOneOf}},
		{"config names are exact", `{"default":"Round_Robin"}`, []string{`default: unknown algorithm "Round_Robin"` + wantOneOf}},
		{"default is a name only", `{"default":{"algorithm":"random"}}`, []string{`default: must be an algorithm name (string), not object`}},
		{"default null", `{"default":null}`, []string{`default: must be an algorithm name (string), not null`}},
		{
			"seed on round-robin", `{"models":{"m":{"algorithm":"round-robin","seed":"x"}}}`,
			[]string{`models["m"]: round-robin config does not support field(s): seed`},
		},
		{
			"floor on pulsar", `{"models":{"m":{"algorithm":"pulsar","max_queue_time_floor_ms":100}}}`,
			[]string{`models["m"]: pulsar config does not support field(s): max_queue_time_floor_ms`},
		},
		{
			"kv on wait-and-widen", `{"models":{"m":{"algorithm":"wait-and-widen","consider_kv_free_tokens":true}}}`,
			[]string{`models["m"]: wait-and-widen config does not support field(s): consider_kv_free_tokens`},
		},
		{
			"sample_count and comparator on random", `{"models":{"m":{"algorithm":"random","sample_count":2,"comparator":"ttft"}}}`,
			[]string{`models["m"]: random config does not support field(s): comparator, sample_count`},
		},
		{
			"kv on power-of-n", `{"request_algorithms":{"power-of-n":{"algorithm":"power-of-n","consider_kv_free_tokens":false}}}`,
			[]string{`request_algorithms["power-of-n"]: power-of-n config does not support field(s): consider_kv_free_tokens`},
		},
		{
			"kv on round-robin", `{"models":{"m":{"algorithm":"round-robin","consider_kv_free_tokens":true}}}`,
			[]string{`models["m"]: round-robin config does not support field(s): consider_kv_free_tokens`},
		},
		{
			"kv on random", `{"models":{"m":{"algorithm":"random","consider_kv_free_tokens":true}}}`,
			[]string{`models["m"]: random config does not support field(s): consider_kv_free_tokens`},
		},
		{
			"wait-and-widen fields on power-of-n", `{"models":{"m":{"algorithm":"power-of-n","n":2,"seed":"s","ttft_bucket_size_ms":5}}}`,
			[]string{`models["m"]: power-of-n config does not support field(s): n, seed, ttft_bucket_size_ms`},
		},
		{
			"ttft_correction on round-robin", `{"models":{"m":{"algorithm":"round-robin","ttft_correction":true}}}`,
			[]string{`models["m"]: round-robin config does not support field(s): ttft_correction`},
		},
		{
			"ttft_correction not a boolean", `{"models":{"m":{"algorithm":"power-of-n","ttft_correction":"off"}}}`,
			[]string{`models["m"].ttft_correction: must be a boolean, not string`},
		},
		{
			"sample_count on pulsar-wait-and-widen", `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","sample_count":2}}}`,
			[]string{`models["m"]: pulsar-wait-and-widen config does not support field(s): sample_count`},
		},
		{
			"sample_count 0", `{"models":{"m":{"algorithm":"power-of-n","sample_count":0}}}`,
			[]string{`models["m"]: power-of-n sample_count must be between 1 and 64`},
		},
		{
			"sample_count 65", `{"models":{"m":{"algorithm":"power-of-n","sample_count":65}}}`,
			[]string{`models["m"]: power-of-n sample_count must be between 1 and 64`},
		},
		{
			"comparator on pulsar-wait-and-widen", `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","comparator":"ttft"}}}`,
			[]string{`models["m"]: comparator is not supported for pulsar-wait-and-widen`},
		},
		{
			"comparator null", `{"models":{"m":{"algorithm":"wait-and-widen","comparator":null}}}`,
			[]string{`models["m"].comparator: must be a string, not null`},
		},
		{
			"comparator null on pulsar-wait-and-widen", `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","comparator":null}}}`,
			[]string{`models["m"].comparator: must be a string, not null`},
		},
		{
			"unknown capacity_wait_order", `{"models":{"m":{"algorithm":"wait-and-widen","capacity_wait_order":"longest"}}}`,
			[]string{`models["m"].capacity_wait_order: must be "arrival" or "shortest", not "longest"`},
		},
		{
			"capacity_wait_order on power-of-n", `{"models":{"m":{"algorithm":"power-of-n","capacity_wait_order":"arrival"}}}`,
			[]string{`models["m"]: power-of-n config does not support field(s): capacity_wait_order`},
		},
		{
			"unknown comparator", `{"models":{"m":{"algorithm":"power-of-n","comparator":"fastest"}}}`,
			[]string{`models["m"].comparator: ` + unknownComparator.Error()},
		},
		{
			"unknown top-level field", `{"default":"random","extra":1}`,
			[]string{`unknown field "extra" (want default, request_algorithms, models)`},
		},
		{
			"unknown detailed field", `{"models":{"m":{"algorithm":"wait-and-widen","bogus":1,"consider_kv_free_tokens":true}}}`,
			[]string{`models["m"]: wait-and-widen config does not support field(s): bogus, consider_kv_free_tokens`},
		},
		{
			"scale -0.1", `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_input_tokens_scale":-0.1}}}`,
			[]string{`models["m"]: cache_affinity_input_tokens_scale must be between 0.0 and 1.0`},
		},
		{
			"scale 1.1", `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_input_tokens_scale":1.1}}}`,
			[]string{`models["m"]: cache_affinity_input_tokens_scale must be between 0.0 and 1.0`},
		},
		{
			"request_algorithms key mismatch", `{"request_algorithms":{"random":"round-robin"}}`,
			[]string{`request_algorithms key random does not match its algorithm round-robin`},
		},
		{
			"model-level key mismatch", `{"models":{"m":{"algorithm":"random","request_algorithms":{"random":{"algorithm":"pulsar"}}}}}`,
			[]string{`models["m"]: request_algorithms key random does not match its algorithm pulsar`},
		},
		{
			"unknown request_algorithms key", `{"request_algorithms":{"sticky":"random"}}`,
			[]string{`request_algorithms key "sticky": unknown algorithm "sticky"` + wantOneOf},
		},
		{
			"two keys for one algorithm", `{"request_algorithms":{"power-of-n":"power-of-n","powerOf2":"powerOf2"}}`,
			[]string{`request_algorithms key powerOf2 names the same algorithm as key power-of-n`},
		},
		{
			"wait-and-widen with pulsar widening", `{"models":{"m":{"algorithm":"wait-and-widen","band_widen_interval_ms":100,"fallback_max_queued":1}}}`,
			[]string{`models["m"]: wait-and-widen config does not support field(s): band_widen_interval_ms, fallback_max_queued`},
		},
		{
			"rendezvous weight on wait-and-widen", `{"models":{"m":{"algorithm":"wait-and-widen","rendezvous_weight":"max-input-tps"}}}`,
			[]string{`models["m"]: wait-and-widen config does not support field(s): rendezvous_weight`},
		},
		{
			"unknown rendezvous weight", `{"models":{"m":{"algorithm":"pulsar","rendezvous_weight":"tps"}}}`,
			[]string{`models["m"].rendezvous_weight: rendezvous_weight must be max-input-tps or last-mean-input-tps, not "tps"`},
		},
		{
			"model-level override validated", `{"models":{"m":{"algorithm":"random","request_algorithms":{"power-of-n":{"algorithm":"power-of-n","sample_count":100}}}}}`,
			[]string{`models["m"].request_algorithms["power-of-n"]: power-of-n sample_count must be between 1 and 64`},
		},
		{
			"virtual nodes bound", `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_virtual_nodes":65537}}}`,
			[]string{`models["m"]: cache_affinity_virtual_nodes must be between 1 and 65536`},
		},
		{
			"type errors name the field", `{"models":{"m":{"algorithm":"wait-and-widen",
			"n":"2","max_queued":-1,"ttft_bucket_size_ms":1.5,"cache_affinity_wait_ms":1e3,"seed":5,
			"ignore_queue_time":"yes","next_bucket_unlock_factor":"0.25","cache_affinity_input_tokens_scale":null,
			"max_input_work_seconds":1e999,"require_input_tokens":1,"max_queued":18446744073709551616}}}`,
			[]string{`models["m"]: duplicate key "max_queued"`},
		},
		{
			"type errors name the field, no duplicates", `{"models":{"m":{"algorithm":"wait-and-widen",
			"n":"2","max_queued":-1,"ttft_bucket_size_ms":1.5,"cache_affinity_wait_ms":1e3,"seed":5,
			"ignore_queue_time":"yes","next_bucket_unlock_factor":"0.25","cache_affinity_input_tokens_scale":null,
			"max_input_work_seconds":1e999,"require_input_tokens":1,"cache_affinity_virtual_nodes":18446744073709551616,
			"max_queue_time_floor_ms":[],"max_queue_time_ceil_ms":{}}}}`,
			[]string{
				`models["m"].n: must be a non-negative integer, not string`,
				`models["m"].max_queued: must be a non-negative integer, not -1`,
				`models["m"].ttft_bucket_size_ms: must be a non-negative integer, not 1.5`,
				`models["m"].cache_affinity_wait_ms: must be a non-negative integer, not 1e3`,
				`models["m"].seed: must be a string, not number`,
				`models["m"].ignore_queue_time: must be a boolean, not string`,
				`models["m"].next_bucket_unlock_factor: must be a number, not string`,
				`models["m"].cache_affinity_input_tokens_scale: must be a number, not null`,
				`models["m"].max_input_work_seconds: must be a finite number, not 1e999`,
				`models["m"].require_input_tokens: must be a boolean, not number`,
				`models["m"].cache_affinity_virtual_nodes: must be at most 18446744073709551615`,
				`models["m"].max_queue_time_floor_ms: must be a non-negative integer, not array`,
				`models["m"].max_queue_time_ceil_ms: must be a non-negative integer, not object`,
			},
		},
		{
			"a bad value keeps the default, so no follow-on problems", `{"models":{"m":{"algorithm":"power-of-n","sample_count":"2","comparator":"none"}}}`,
			[]string{
				`models["m"].sample_count: must be a non-negative integer, not string`,
				`models["m"].comparator: ` + noneComparator.Error(),
			},
		},
		{"missing algorithm", `{"models":{"m":{"seed":"x"}}}`, []string{`models["m"]: missing field "algorithm"`}},
		{
			"unknown algorithm in detailed entry", `{"models":{"m":{"algorithm":"sticky"}}}`,
			[]string{`models["m"].algorithm: unknown algorithm "sticky"` + wantOneOf},
		},
		{
			"algorithm of the wrong type", `{"models":{"m":{"algorithm":7}}}`,
			[]string{`models["m"].algorithm: must be an algorithm name (string), not number`},
		},
		{"entry of the wrong type", `{"models":{"a":["random"],"b":null,"c":true}}`, []string{
			`models["a"]: must be an algorithm name or an object with "algorithm", not array`,
			`models["b"]: must be an algorithm name or an object with "algorithm", not null`,
			`models["c"]: must be an algorithm name or an object with "algorithm", not boolean`,
		}},
		{"models of the wrong type", `{"models":["m"]}`, []string{`models: must be an object mapping model ids to entries, not array`}},
		{
			"request_algorithms of the wrong type", `{"request_algorithms":"random"}`,
			[]string{`request_algorithms: must be an object mapping algorithm names to entries, not string`},
		},
		{
			"nested request_algorithms of the wrong type", `{"models":{"m":{"algorithm":"random","request_algorithms":{"random":{"algorithm":"random","request_algorithms":5}}}}}`,
			[]string{`models["m"].request_algorithms["random"].request_algorithms: must be an object mapping algorithm names to entries, not number`},
		},
		{
			"discarded entries are still decoded", `{"request_algorithms":{"random":{"algorithm":"random","request_algorithms":{"pulsar":{"algorithm":"pulsar","n":1}}}}}`,
			[]string{`request_algorithms["random"].request_algorithms["pulsar"]: pulsar config does not support field(s): n`},
		},
		{"duplicate top-level key", `{"default":"random","default":"random"}`, []string{`duplicate key "default"`}},
		{"duplicate model", `{"models":{"m":"random","m":"pulsar"}}`, []string{`models: duplicate key "m"`}},
		{"not an object", `["default"]`, []string{`must be a JSON object, not array`}},
		{"null document", `null`, []string{`must be a JSON object, not null`}},
		{"empty document", ``, []string{`unexpected end of JSON input`}},
		{"syntax error", `{"default":}`, []string{`invalid character '}' looking for beginning of value`}},
		{"trailing data", `{} {}`, []string{`invalid character '{' after top-level value`}},
		{
			"problems are all reported in document order", `{"default":"x","models":{"a":{"algorithm":"power-of-n","sample_count":0},"b":{"algorithm":"random","seed":"s"}},"zzz":0}`,
			[]string{
				`default: unknown algorithm "x"` + wantOneOf,
				`models["a"]: power-of-n sample_count must be between 1 and 64`,
				`models["b"]: random config does not support field(s): seed`,
				`unknown field "zzz" (want default, request_algorithms, models)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse(%s) = %+v, want an error", tt.doc, c)
			}
			if c != nil {
				t.Errorf("Parse returned a config with an error")
			}
			if !strings.HasPrefix(err.Error(), "invalid lb config: ") {
				t.Errorf("error %q lacks the prefix", err)
			}
			if diff := cmp.Diff(tt.want, problems(err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseNestingLimit(t *testing.T) {
	t.Parallel()
	nest := func(levels int) string {
		doc := `"random"`
		for range levels {
			doc = `{"algorithm":"random","request_algorithms":{"random":` + doc + `}}`
		}
		return `{"request_algorithms":{"random":` + doc + `}}`
	}
	// The top-level map is depth 1, so seven nested entries reach depth 8.
	if _, err := Parse([]byte(nest(7))); err != nil {
		t.Errorf("depth 8: %v", err)
	}
	_, err := Parse([]byte(nest(8)))
	want := []string{strings.Repeat(`request_algorithms["random"].`, 8) + `request_algorithms: nested more than 8 levels deep`}
	if diff := cmp.Diff(want, problems(err)); diff != "" {
		t.Errorf("depth 9 problems (-want +got):\n%s", diff)
	}
}

package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// uiSettingSamples is a valid value, not the default of any algorithm, of every key.
var uiSettingSamples = map[string]any{
	"require_cache_affinity_key": true, "require_input_tokens": true, "max_input_work_seconds": 2.5,
	"sample_count": 3, "comparator": "queue-time", "tie_tolerance_ms": 7, "ttft_correction": false,
	"seed": "s1", "cache_affinity_backend_selection_count": 2, "cache_affinity_virtual_nodes": 100,
	"cache_affinity_wait_ms": 300, "cache_affinity_input_tokens_scale": 0.5, "max_queue_time_floor_ms": 100,
	"max_queue_time_ceil_ms": 400, "ttft_bucket_size_ms": 30, "next_bucket_unlock_factor": 0.5, "n": 3,
	"max_queued": 2, "ignore_queue_time": true, "ignore_input_processing_time": true, "last_cluster_affinity": true,
	"capacity_wait_ms": 2000, "capacity_wait_order": "shortest", "prefill_wait": false, "session_affinity_ttl_ms": 90_000, "session_table_size": 1000,
	"prefix_affinity": true, "prefix_index_blocks": 1000, "prefix_index_ttl_ms": 120_000,
	"consider_kv_free_tokens": true, "rendezvous_weight": "last-mean-input-tps", "band_widen_interval_ms": 50,
	"fallback_max_queued": 1,
}

// uiSettingFields maps every field of lbconfig.Entry to its key ("": not a setting of the
// file, or folded into another key's value).
var uiSettingFields = map[string]string{
	"Algorithm": "", "Name": "", "FromExpression": "", "HasMaxInputWork": "", "HasQueueSLO": "", "HasBandWiden": "",
	"RequireCacheAffinityKey": "require_cache_affinity_key", "RequireInputTokens": "require_input_tokens",
	"MaxInputWorkSeconds": "max_input_work_seconds", "SampleCount": "sample_count", "Comparator": "comparator",
	"TieTolerance": "tie_tolerance_ms", "Seed": "seed", "VirtualNodes": "cache_affinity_virtual_nodes",
	"SelectionCount": "cache_affinity_backend_selection_count", "AffinityWait": "cache_affinity_wait_ms",
	"AffinityInputScale": "cache_affinity_input_tokens_scale", "QueueFloor": "max_queue_time_floor_ms",
	"QueueCeil": "max_queue_time_ceil_ms", "BucketSize": "ttft_bucket_size_ms", "UnlockFactor": "next_bucket_unlock_factor",
	"N": "n", "SessionTTL": "session_affinity_ttl_ms", "SessionTableSize": "session_table_size",
	"PrefixAffinity": "prefix_affinity", "PrefixIndexBlocks": "prefix_index_blocks", "PrefixIndexTTL": "prefix_index_ttl_ms",
	"CapacityWait": "capacity_wait_ms", "ShortestFirst": "capacity_wait_order", "PrefillWait": "prefill_wait", "LastClusterAffinity": "last_cluster_affinity",
	"MaxQueued": "max_queued", "IgnoreQueueTime": "ignore_queue_time", "IgnoreInputProcessingTime": "ignore_input_processing_time",
	"BandWiden": "band_widen_interval_ms", "FallbackMaxQueued": "fallback_max_queued", "RendezvousWeight": "rendezvous_weight",
	"ConsiderKVFreeTokens": "consider_kv_free_tokens", "TTFTCorrection": "ttft_correction",
}

// Every field of a decoded entry is shown under a key of the status page, and every key
// has a sample for the tests below.
func TestUISettingsCoverEveryEntryField(t *testing.T) {
	keys := map[string]bool{}
	for _, d := range uiSettingDefs {
		if keys[d.key] {
			t.Errorf("key %s listed twice", d.key)
		}
		keys[d.key] = true
		if _, ok := uiSettingSamples[d.key]; !ok {
			t.Errorf("key %s has no sample value", d.key)
		}
	}
	for f := range reflect.TypeFor[lbconfig.Entry]().Fields() {
		key, ok := uiSettingFields[f.Name]
		switch {
		case !ok:
			t.Errorf("lbconfig.Entry.%s is not shown on the status page: add its key to uiSettingDefs and uiSettingFields", f.Name)
		case key != "" && !keys[key]:
			t.Errorf("lbconfig.Entry.%s: key %s is not in uiSettingDefs", f.Name, key)
		}
	}
}

// parseEntry parses an lb-config whose model m has the entry obj.
func parseEntry(t *testing.T, obj map[string]any) (lbconfig.Entry, error) {
	t.Helper()
	doc, err := json.Marshal(map[string]any{"models": map[string]any{"m": obj}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := lbconfig.Parse(doc)
	if err != nil {
		return lbconfig.Entry{}, err //nolint:wrapcheck // the test reports it
	}
	return c.Models["m"].Entry, nil
}

// A key is listed for exactly the algorithms whose lb-config entries accept it.
func TestUISettingsKeysPerAlgorithm(t *testing.T) {
	for _, a := range lbconfig.Algorithms() {
		for _, d := range uiSettingDefs {
			obj := map[string]any{"algorithm": a.String(), d.key: uiSettingSamples[d.key]}
			_, err := parseEntry(t, obj)
			if (err == nil) != d.takes(a) {
				t.Errorf("%s %s: the status page lists it: %v; the lb-config parses it: %v", a, d.key, d.takes(a), err)
			}
		}
	}
}

// An entry with every key its algorithm takes set to a non-default value shows each as
// set, with the value the file wrote; the settings shown, written back as a file, decode
// to the same entry. An entry of defaults shows every setting as default.
func TestUISettingsRoundTrip(t *testing.T) {
	for _, a := range lbconfig.Algorithms() {
		def := lbconfig.DefaultEntry(a)
		for _, s := range uiSettings(&def) {
			if !s.Default {
				t.Errorf("%s default entry: %s = %s not marked default", a, s.Key, s.Text)
			}
		}
		obj := map[string]any{"algorithm": a.String()}
		for _, d := range uiSettingDefs {
			if d.takes(a) {
				obj[d.key] = uiSettingSamples[d.key]
			}
		}
		e, err := parseEntry(t, obj)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		shown := uiSettings(&e)
		back := map[string]any{"algorithm": a.String()}
		var keys []string
		for _, s := range shown {
			keys = append(keys, s.Key)
			want, _ := json.Marshal(uiSettingSamples[s.Key])
			got, _ := json.Marshal(s.Value)
			if s.Default || !bytes.Equal(got, want) || s.Text == "" {
				t.Errorf("%s %s: shown %s (%q, default %v), want %s, not default", a, s.Key, got, s.Text, s.Default, want)
			}
			back[s.Key] = s.Value
		}
		for k := range obj {
			if k != "algorithm" && !slices.Contains(keys, k) {
				t.Errorf("%s: %s not shown", a, k)
			}
		}
		again, err := parseEntry(t, back)
		if err != nil || !again.SameSettings(e) {
			t.Errorf("%s: the settings shown decode to %+v (%v), want %+v", a, again, err, e)
		}
	}
}

// Durations read in the unit that fits; a zero that means something says what.
func TestUIMillisText(t *testing.T) {
	for _, c := range []struct {
		ms   int64
		zero string
		want string
	}{
		{0, "", "0 ms"},
		{0, "off", "0 (off)"},
		{20, "", "20 ms"},
		{1500, "", "1.5 s"},
		{2000, "", "2 s"},
		{300_000, "", "5 min"},
		{90_000, "", "90 s"},
	} {
		v, text := uiMillis(time.Duration(c.ms)*time.Millisecond, c.zero)
		if v != c.ms || text != c.want {
			t.Errorf("%d ms: %v %q, want %q", c.ms, v, text, c.want)
		}
	}
}

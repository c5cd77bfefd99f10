package gateway

import (
	"slices"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// The status page shows a target's lb-config entry the way the lb-config file writes it:
// each setting under its file key (cache_affinity_wait_ms, not the decoded entry's Go
// field), with its value as the file would write it, a readable text with the unit, and
// whether it is the algorithm's default. uiSettingDefs is the one list of the keys; the
// tests tie it to the decoder (every key parses back to the entry it was rendered from, and
// every field of lbconfig.Entry is listed).

// uiSetting is one setting of a target's lb-config entry.
type uiSetting struct {
	Key     string `json:"key"`     // the lb-config key
	Value   any    `json:"value"`   // as the file writes it (milliseconds for *_ms); null: not set
	Text    string `json:"text"`    // for reading, with its unit
	Default bool   `json:"default"` // the algorithm's default (not written, or written as it)
}

// uiSettingDef is one lb-config key: the algorithms that take it and how to read it from
// an entry.
type uiSettingDef struct {
	key  string
	algs []lbconfig.Algorithm // nil: every algorithm
	get  func(e *lbconfig.Entry) (value any, text string)
}

// Groups of algorithms taking the same keys.
var (
	uiAlgsTTFT     = []lbconfig.Algorithm{lbconfig.PowerOfN, lbconfig.WaitAndWiden, lbconfig.PulsarWaitAndWiden}
	uiAlgsCompare  = []lbconfig.Algorithm{lbconfig.PowerOfN, lbconfig.WaitAndWiden}
	uiAlgsWAW      = []lbconfig.Algorithm{lbconfig.WaitAndWiden, lbconfig.PulsarWaitAndWiden}
	uiAlgsByKey    = []lbconfig.Algorithm{lbconfig.WaitAndWiden, lbconfig.Pulsar, lbconfig.PulsarWaitAndWiden}
	uiAlgsPulsar   = []lbconfig.Algorithm{lbconfig.Pulsar, lbconfig.PulsarWaitAndWiden}
	uiAlgsPOWN     = []lbconfig.Algorithm{lbconfig.PowerOfN}
	uiAlgsWAWOnly  = []lbconfig.Algorithm{lbconfig.WaitAndWiden}
	uiAlgsPWAWOnly = []lbconfig.Algorithm{lbconfig.PulsarWaitAndWiden}
)

// uiSettingDefs lists every key of a detailed lb-config entry but algorithm and
// request_algorithms.
var uiSettingDefs = []uiSettingDef{
	{"require_cache_affinity_key", nil, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.RequireCacheAffinityKey) }},
	{"require_input_tokens", nil, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.RequireInputTokens) }},
	{"max_input_work_seconds", nil, func(e *lbconfig.Entry) (any, string) {
		if !e.HasMaxInputWork {
			return nil, "no limit"
		}
		return e.MaxInputWorkSeconds, uiNumber(e.MaxInputWorkSeconds) + " s"
	}},
	{"sample_count", uiAlgsPOWN, func(e *lbconfig.Entry) (any, string) { return uiCount(e.SampleCount) }},
	{"comparator", uiAlgsCompare, func(e *lbconfig.Entry) (any, string) { return e.Comparator.String(), e.Comparator.String() }},
	{"tie_tolerance_ms", uiAlgsCompare, func(e *lbconfig.Entry) (any, string) { return uiMillis(e.TieTolerance, "only exact ties") }},
	{"ttft_correction", uiAlgsTTFT, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.TTFTCorrection) }},
	{"seed", uiAlgsByKey, func(e *lbconfig.Entry) (any, string) {
		if e.Seed == "" {
			return "", `"" (none)`
		}
		return e.Seed, strconv.Quote(e.Seed)
	}},
	{"cache_affinity_backend_selection_count", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) {
		v, text := uiCount(e.SelectionCount)
		if e.SelectionCount == 0 {
			text += " (no affinity group)"
		}
		return v, text
	}},
	{"cache_affinity_virtual_nodes", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiCount(e.VirtualNodes) }},
	{"cache_affinity_wait_ms", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiMillis(e.AffinityWait, "") }},
	{"cache_affinity_input_tokens_scale", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) {
		return e.AffinityInputScale, "× " + uiNumber(e.AffinityInputScale)
	}},
	{"max_queue_time_floor_ms", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiMillis(e.QueueFloor, "") }},
	{"max_queue_time_ceil_ms", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiMillis(e.QueueCeil, "") }},
	{"ttft_bucket_size_ms", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiMillis(e.BucketSize, "") }},
	{"next_bucket_unlock_factor", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return e.UnlockFactor, uiNumber(e.UnlockFactor) }},
	{"n", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiCount(e.N) }},
	{"max_queued", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) {
		return e.MaxQueued, strconv.FormatUint(e.MaxQueued, 10) + " requests"
	}},
	{"ignore_queue_time", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.IgnoreQueueTime) }},
	{"ignore_input_processing_time", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.IgnoreInputProcessingTime) }},
	{"last_cluster_affinity", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.LastClusterAffinity) }},
	{"capacity_wait_ms", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) { return uiMillis(e.CapacityWait, "fail at once") }},
	{"capacity_wait_order", uiAlgsWAW, func(e *lbconfig.Entry) (any, string) {
		if e.ShortestFirst {
			return "shortest", "least work first"
		}
		return "arrival", "first come, first served"
	}},
	{"prefill_wait", uiAlgsByKey, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.PrefillWait) }},
	{"session_affinity_ttl_ms", uiAlgsWAWOnly, func(e *lbconfig.Entry) (any, string) { return uiMillis(e.SessionTTL, "off") }},
	{"session_table_size", uiAlgsWAWOnly, func(e *lbconfig.Entry) (any, string) {
		v, text := uiCount(e.SessionTableSize)
		return v, text + " keys"
	}},
	{"prefix_affinity", uiAlgsWAWOnly, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.PrefixAffinity) }},
	{"prefix_index_blocks", uiAlgsWAWOnly, func(e *lbconfig.Entry) (any, string) {
		v, text := uiCount(e.PrefixIndexBlocks)
		return v, text + " blocks"
	}},
	{"prefix_index_ttl_ms", uiAlgsWAWOnly, func(e *lbconfig.Entry) (any, string) { return uiMillis(e.PrefixIndexTTL, "no expiry") }},
	{"consider_kv_free_tokens", uiAlgsPulsar, func(e *lbconfig.Entry) (any, string) { return uiFlag(e.ConsiderKVFreeTokens) }},
	{"rendezvous_weight", uiAlgsPulsar, func(e *lbconfig.Entry) (any, string) {
		return e.RendezvousWeight.String(), e.RendezvousWeight.String()
	}},
	{"band_widen_interval_ms", uiAlgsPWAWOnly, func(e *lbconfig.Entry) (any, string) {
		if !e.HasBandWiden {
			return nil, "the affinity hold (cache_affinity_wait_ms)"
		}
		return uiMillis(e.BandWiden, "every cluster at the hold")
	}},
	{"fallback_max_queued", uiAlgsPWAWOnly, func(e *lbconfig.Entry) (any, string) {
		return e.FallbackMaxQueued, strconv.FormatUint(e.FallbackMaxQueued, 10) + " requests"
	}},
}

// takes reports whether algorithm a takes the key.
func (d *uiSettingDef) takes(a lbconfig.Algorithm) bool {
	return d.algs == nil || slices.Contains(d.algs, a)
}

// uiSettings lists the settings of e's algorithm, each marked when it is the default.
func uiSettings(e *lbconfig.Entry) []uiSetting {
	def := lbconfig.DefaultEntry(e.Algorithm)
	out := []uiSetting{}
	for i := range uiSettingDefs {
		d := &uiSettingDefs[i]
		if !d.takes(e.Algorithm) {
			continue
		}
		v, text := d.get(e)
		dv, _ := d.get(&def)
		out = append(out, uiSetting{Key: d.key, Value: v, Text: text, Default: v == dv})
	}
	return out
}

func uiFlag(b bool) (any, string) { return b, strconv.FormatBool(b) }

func uiCount(n int) (any, string) { return n, strconv.Itoa(n) }

func uiNumber(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// ms is a duration setting: whole milliseconds in the file, read in ms, s or min; zero
// says what 0 means ("": just 0 ms).
func uiMillis(d time.Duration, zero string) (any, string) {
	v := d.Milliseconds()
	var text string
	switch {
	case d == 0 && zero != "":
		text = "0 (" + zero + ")"
	case d < time.Second:
		text = strconv.FormatInt(v, 10) + " ms"
	case d%time.Minute == 0 && d < 24*time.Hour:
		text = strconv.FormatInt(int64(d/time.Minute), 10) + " min"
	default:
		text = uiNumber(d.Seconds()) + " s"
	}
	return v, text
}

package wire

import (
	"strconv"
	"unicode/utf8"
)

// decodeRegistration decodes a registration body into r with the result of decodeStrict:
// the same value for a body decodeStrict accepts, the same error for one it refuses.
//
// A heartbeat is a full snapshot sent every second by every pylon, so the decode is most
// of a registration's cost. A pylon writes its snapshot with encoding/json, so nearly
// every body has one simple shape: the known fields spelled exactly, each once, strings
// without escapes, integers without fraction or exponent. fastRegistration decodes that
// shape directly, without reflection; anything else in the body (an escape, a null, a
// field name in another case, an unknown or repeated field, a wrong type, a syntax error)
// makes it give up, and the body is decoded again by decodeStrict, which accepts or
// refuses it exactly as before. The fast path therefore never decides what is valid: it
// only reaches, more cheaply, the value decodeStrict would have produced (the fuzz test
// FuzzFastRegistration holds it to that).
func decodeRegistration(body []byte, r *Registration) error {
	if fastRegistration(body, r) {
		return nil
	}
	*r = Registration{}
	return decodeStrict(body, r)
}

// fastRegistration decodes body into r when it has the simple shape (see
// decodeRegistration) and reports whether it did; on false, r holds partial values.
func fastRegistration(body []byte, r *Registration) bool {
	d := fastDecoder{b: body}
	if !d.object(func(key []byte) bool { return d.registrationField(key, r) }) {
		return false
	}
	d.space()
	return d.i == len(d.b)
}

// fastDecoder reads the simple shape of JSON; each method reports false on anything
// outside it.
type fastDecoder struct {
	b    []byte
	i    int
	seen uint64 // fields met in the object being read, for refusing repeats
}

// Field bits of fastDecoder.seen, per object kind; a nested object saves and restores seen.
const (
	fID = 1 << iota
	fURL
	fClusterID
	fRoutingKey
	fHeartbeatMs
	fDispatchSeq
	fSlotShare
	fModels
)

const (
	fStatus = 1 << iota
	fGeneration
	fBuild
	fStats
)

func (d *fastDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and consumes c if it comes next.
func (d *fastDecoder) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling field with each key (its bytes, valid until the
// next read) to read the value. Every key must be new in this object.
func (d *fastDecoder) object(field func(key []byte) bool) bool {
	if !d.next('{') {
		return false
	}
	outer := d.seen
	defer func() { d.seen = outer }()
	d.seen = 0
	if d.next('}') {
		return true
	}
	for {
		d.space()
		key, ok := d.rawString()
		if !ok || !d.next(':') || !field(key) {
			return false
		}
		if d.next(',') {
			continue
		}
		return d.next('}')
	}
}

// once marks field bit f seen and reports whether it was new.
func (d *fastDecoder) once(f uint64) bool {
	if d.seen&f != 0 {
		return false
	}
	d.seen |= f
	return true
}

// rawString reads a string without escapes or control characters, in valid UTF-8, and
// returns its bytes (inside d.b).
func (d *fastDecoder) rawString() ([]byte, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	start := d.i + 1
	ascii := true
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			d.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (d *fastDecoder) str(dst *string) bool {
	d.space()
	s, ok := d.rawString()
	if ok {
		*dst = string(s)
	}
	return ok
}

// digits reads a JSON number, optionally negative, of integer digits only (no fraction, no
// exponent, no leading zero) and returns its text.
func (d *fastDecoder) digits(negative bool) ([]byte, bool) {
	d.space()
	start := d.i
	if negative && d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	first := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	n := d.i - first
	if n == 0 || (n > 1 && d.b[first] == '0') {
		return nil, false
	}
	// A fraction or an exponent is valid JSON that a Go integer refuses: give it to the
	// standard decoder for its error.
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return nil, false
	}
	return d.b[start:d.i], true
}

func (d *fastDecoder) uint(dst *uint64) bool {
	s, ok := d.digits(false)
	if !ok {
		return false
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	*dst = v
	return err == nil
}

func (d *fastDecoder) int(dst *int64) bool {
	s, ok := d.digits(true)
	if !ok {
		return false
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	*dst = v
	return err == nil
}

// float reads a JSON number, checked against the JSON grammar, as encoding/json does:
// strconv.ParseFloat of its text.
func (d *fastDecoder) float(dst *float64) bool {
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	intStart := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if n := d.i - intStart; n == 0 || (n > 1 && d.b[intStart] == '0') {
		return false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if !d.someDigits() {
			return false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if !d.someDigits() {
			return false
		}
	}
	v, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
	*dst = v
	return err == nil
}

// someDigits reads one or more decimal digits.
func (d *fastDecoder) someDigits() bool {
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

func (d *fastDecoder) registrationField(key []byte, r *Registration) bool {
	switch string(key) {
	case "inference_server_id":
		return d.once(fID) && d.str(&r.ID)
	case "inference_server_url":
		return d.once(fURL) && d.str(&r.URL)
	case "cluster_id":
		return d.once(fClusterID) && d.str(&r.ClusterID)
	case "routing_key":
		return d.once(fRoutingKey) && d.str(&r.RoutingKey)
	case "heartbeat_ms":
		return d.once(fHeartbeatMs) && d.uint(&r.HeartbeatMs)
	case "dispatch_seq":
		return d.once(fDispatchSeq) && d.uint(&r.DispatchSeq)
	case "engine_slot_share":
		return d.once(fSlotShare) && d.uint(&r.EngineSlotShare)
	case "models":
		if !d.once(fModels) {
			return false
		}
		r.Models = map[string]Model{}
		return d.object(func(name []byte) bool {
			if _, dup := r.Models[string(name)]; dup {
				return false
			}
			key := string(name)
			var m Model
			if !d.object(func(k []byte) bool { return d.modelField(k, &m) }) {
				return false
			}
			r.Models[key] = m
			return true
		})
	}
	return false
}

func (d *fastDecoder) modelField(key []byte, m *Model) bool {
	switch string(key) {
	case "status":
		return d.once(fStatus) && d.str(&m.Status)
	case "generation":
		return d.once(fGeneration) && d.uint(&m.Generation)
	case "build":
		return d.once(fBuild) && d.uint(&m.Build)
	case "stats":
		return d.once(fStats) && d.object(func(k []byte) bool { return d.statsField(k, &m.Stats) })
	}
	return false
}

// Field bits of a Stats object.
const (
	fLastMeanInputTPS = 1 << iota
	fOutputTPS
	fQueueSize
	fQueuedInputSize
	fMaxOutputTPS
	fKVCacheCapacityTokens
	fKVCacheUsedTokens
	fKVCacheFreeTokens
	fNumRunningQueries
	fMaxEngineConcurrency
	fTotalQueryInputSize
	fQueueTimeEstimateMs
	fInputProcessingQueries
	fOutputGenerationQueries
	fStatsObservedAtUnixMs
	fStatsCapabilities
	fStatsSources
)

func (d *fastDecoder) statsField(key []byte, s *Stats) bool {
	switch string(key) {
	case "last_mean_input_tps":
		return d.once(fLastMeanInputTPS) && d.float(&s.LastMeanInputTPS)
	case "output_tps":
		return d.once(fOutputTPS) && d.float(&s.OutputTPS)
	case "queue_size":
		return d.once(fQueueSize) && d.uint(&s.QueueSize)
	case "queued_input_size":
		return d.once(fQueuedInputSize) && d.uint(&s.QueuedInputSize)
	case "max_output_tps":
		return d.once(fMaxOutputTPS) && d.float(&s.MaxOutputTPS)
	case "kv_cache_capacity_tokens":
		return d.once(fKVCacheCapacityTokens) && d.uint(&s.KVCacheCapacityTokens)
	case "kv_cache_used_tokens":
		return d.once(fKVCacheUsedTokens) && d.uint(&s.KVCacheUsedTokens)
	case "kv_cache_free_tokens":
		return d.once(fKVCacheFreeTokens) && d.uint(&s.KVCacheFreeTokens)
	case "num_running_queries":
		return d.once(fNumRunningQueries) && d.uint(&s.NumRunningQueries)
	case "max_engine_concurrency":
		return d.once(fMaxEngineConcurrency) && d.uint(&s.MaxEngineConcurrency)
	case "total_query_input_size":
		return d.once(fTotalQueryInputSize) && d.uint(&s.TotalQueryInputSize)
	case "queue_time_estimate_ms_by_priority":
		if !d.once(fQueueTimeEstimateMs) {
			return false
		}
		s.QueueTimeEstimateMs = map[string]uint64{}
		return d.estimates(s.QueueTimeEstimateMs)
	case "input_processing_queries":
		return d.once(fInputProcessingQueries) && d.uint(&s.InputProcessingQueries)
	case "output_generation_queries":
		return d.once(fOutputGenerationQueries) && d.uint(&s.OutputGenerationQueries)
	case "stats_observed_at_unix_ms":
		return d.once(fStatsObservedAtUnixMs) && d.int(&s.StatsObservedAtUnixMs)
	case "stats_capabilities":
		return d.once(fStatsCapabilities) && d.strings(&s.StatsCapabilities)
	case "stats_sources":
		return d.once(fStatsSources) && d.strings(&s.StatsSources)
	}
	return false
}

// estimates reads queue_time_estimate_ms_by_priority into m, which the caller makes: {}
// leaves it empty but not nil, as encoding/json does.
func (d *fastDecoder) estimates(m map[string]uint64) bool {
	return d.object(func(k []byte) bool {
		if _, dup := m[string(k)]; dup {
			return false
		}
		key := string(k)
		var v uint64
		if !d.uint(&v) {
			return false
		}
		m[key] = v
		return true
	})
}

// strings reads an array of strings; [] is an empty, non-nil slice, as encoding/json
// makes it.
func (d *fastDecoder) strings(dst *[]string) bool {
	if !d.next('[') {
		return false
	}
	list := []string{}
	if !d.next(']') {
		for {
			var s string
			if !d.str(&s) {
				return false
			}
			list = append(list, s)
			if d.next(',') {
				continue
			}
			if !d.next(']') {
				return false
			}
			break
		}
	}
	*dst = list
	return true
}

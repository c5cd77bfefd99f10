package lbconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engines/load"
)

// maxOverrideDepth bounds how deeply request_algorithms maps may nest inside each other.
// Only the first level is used; deeper ones are decoded and discarded, as the reference
// router does.
const maxOverrideDepth = 8

// Field names of detailed entries.
const (
	fieldAlgorithm         = "algorithm"
	fieldRequestAlgorithms = "request_algorithms"
	fieldQueueFloor        = "max_queue_time_floor_ms"
	fieldQueueCeil         = "max_queue_time_ceil_ms"
)

// fieldPrefillWait is prefill_wait, accepted by the algorithms that route by key.
const fieldPrefillWait = "prefill_wait"

// Fields of the pulsar ranking's weight and pulsar-wait-and-widen's widening.
const (
	fieldRendezvousWeight = "rendezvous_weight"
	fieldBandWiden        = "band_widen_interval_ms"
)

// fieldTieTolerance is the near-tie band of power-of-n and wait-and-widen.
const fieldTieTolerance = "tie_tolerance_ms"

// fieldTTFTCorrection switches the learned TTFT correction of the estimating algorithms.
const fieldTTFTCorrection = "ttft_correction"

// commonFields are accepted on every detailed entry.
var commonFields = []string{
	fieldAlgorithm, "require_cache_affinity_key", "require_input_tokens",
	"max_input_work_seconds", fieldRequestAlgorithms,
}

// wawFields are the wait-and-widen settings.
var wawFields = []string{
	"comparator", "seed", "cache_affinity_virtual_nodes", "cache_affinity_backend_selection_count",
	"cache_affinity_wait_ms", "cache_affinity_input_tokens_scale", fieldQueueFloor, fieldQueueCeil,
	"ttft_bucket_size_ms", "next_bucket_unlock_factor", "n", "max_queued", "ignore_queue_time",
	"ignore_input_processing_time", "last_cluster_affinity", "capacity_wait_ms", "capacity_wait_order", fieldPrefillWait, fieldTTFTCorrection,
}

// algorithmFields lists the algorithm-specific fields of each algorithm. A comparator is
// decoded for pulsar-wait-and-widen so that Validate can refuse it by name.
var algorithmFields = [numAlgorithms][]string{
	PowerOfN: {"sample_count", "comparator", fieldTieTolerance, fieldTTFTCorrection},
	WaitAndWiden: append(slices.Clone(wawFields), fieldTieTolerance, "session_affinity_ttl_ms", "session_table_size",
		"prefix_affinity", "prefix_index_blocks", "prefix_index_ttl_ms"),
	RoundRobin:         nil,
	Random:             nil,
	Pulsar:             {"seed", "consider_kv_free_tokens", fieldPrefillWait, fieldRendezvousWeight},
	PulsarWaitAndWiden: append(slices.Clone(wawFields), "consider_kv_free_tokens", fieldRendezvousWeight, fieldBandWiden, "fallback_max_queued"),
}

func supports(a Algorithm, field string) bool {
	return slices.Contains(commonFields, field) || slices.Contains(algorithmFields[a], field)
}

// Parse decodes lb-config.json strictly: unknown fields, fields of another algorithm,
// duplicate keys, nulls, wrong types, request_algorithms keys that do not match their
// entry, and settings that fail Entry.Validate are all errors. The error joins one message
// per problem, each prefixed with where it was found.
func Parse(data []byte) (*Config, error) {
	var p parser
	c := p.config(data)
	if err := errors.Join(p.errs...); err != nil {
		return nil, fmt.Errorf("invalid lb config: %w", err)
	}
	return c, nil
}

// parser collects every problem of one document.
type parser struct{ errs []error }

func (p *parser) add(path string, err error) {
	p.errs = appendPrefixed(p.errs, path, []error{err})
}

func (p *parser) config(data []byte) *Config {
	c := &Config{Default: DefaultEntry(PowerOfN), RequestAlgorithms: map[Algorithm]Entry{}, Models: map[string]Model{}}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		if err == nil { // not reachable: json.Valid and json.Unmarshal agree
			err = errors.New("invalid JSON")
		}
		p.add("", err)
		return nil
	}
	if kind := jsonKind(data); kind != "object" {
		p.add("", fmt.Errorf("must be a JSON object, not %s", kind))
		return nil
	}
	members, err := decodeObject(data)
	if err != nil {
		p.add("", err)
		return nil
	}
	for _, m := range members {
		switch m.key {
		case "default":
			p.defaultName(c, m.value)
		case fieldRequestAlgorithms:
			c.RequestAlgorithms = p.overrides("", m.value, 1)
		case "models":
			c.Models = p.models(m.value)
		default:
			p.add("", fmt.Errorf("unknown field %q (want default, request_algorithms, models)", m.key))
		}
	}
	return c
}

func (p *parser) defaultName(c *Config, raw json.RawMessage) {
	if kind := jsonKind(raw); kind != "string" {
		p.add("default", fmt.Errorf("must be an algorithm name (string), not %s", kind))
		return
	}
	name, err := decodeString(raw)
	if err != nil {
		p.add("default", err)
		return
	}
	a, err := ParseAlgorithm(name)
	if err != nil {
		p.add("default", err)
		return
	}
	c.Default = DefaultEntry(a)
	c.Default.Name = name
}

func (p *parser) models(raw json.RawMessage) map[string]Model {
	out := map[string]Model{}
	if kind := jsonKind(raw); kind != "object" {
		p.add("models", fmt.Errorf("must be an object mapping model ids to entries, not %s", kind))
		return out
	}
	members, err := decodeObject(raw)
	if err != nil {
		p.add("models", err)
		return out
	}
	for _, m := range members {
		path := modelPath(m.key)
		e, nested, ok := p.entry(path, m.value)
		if !ok {
			continue
		}
		model := Model{Entry: e}
		if nested != nil {
			model.RequestAlgorithms = p.overrides(path, nested, 1)
		}
		p.errs = appendPrefixed(p.errs, path, e.problems())
		out[m.key] = model
	}
	return out
}

// overrides decodes a request_algorithms map found at parent. Only depth 1 (top level or
// directly under a model) is kept and checked; deeper maps are decoded and discarded.
func (p *parser) overrides(parent string, raw json.RawMessage, depth int) map[Algorithm]Entry {
	out := map[Algorithm]Entry{}
	mapPath := joinPath(parent, fieldRequestAlgorithms)
	if depth > maxOverrideDepth {
		p.add(mapPath, fmt.Errorf("nested more than %d levels deep", maxOverrideDepth))
		return out
	}
	if kind := jsonKind(raw); kind != "object" {
		p.add(mapPath, fmt.Errorf("must be an object mapping algorithm names to entries, not %s", kind))
		return out
	}
	members, err := decodeObject(raw)
	if err != nil {
		p.add(mapPath, err)
		return out
	}
	keep := depth == 1
	keys := make(map[Algorithm]string, len(members))
	for _, m := range members {
		path := overridePath(parent, m.key)
		e, nested, ok := p.entry(path, m.value)
		if nested != nil {
			p.overrides(path, nested, depth+1) // parsed, then discarded
		}
		if !ok || !keep {
			continue
		}
		a, err := ParseAlgorithm(m.key)
		switch {
		case err != nil:
			p.add(parent, fmt.Errorf("request_algorithms key %q: %w", m.key, err))
			continue
		case a != e.Algorithm:
			p.add(parent, keyMismatch(m.key, e.Algorithm))
			continue
		case keys[a] != "":
			p.add(parent, fmt.Errorf("request_algorithms key %s names the same algorithm as key %s", m.key, keys[a]))
			continue
		}
		keys[a] = m.key
		p.errs = appendPrefixed(p.errs, path, e.problems())
		out[a] = e
	}
	return out
}

// entry decodes a name string or a detailed object. It returns the entry, the raw
// request_algorithms member if there was one, and whether the algorithm could be
// determined (when false the entry is useless; the problem has been recorded).
func (p *parser) entry(path string, raw json.RawMessage) (Entry, json.RawMessage, bool) {
	switch kind := jsonKind(raw); kind {
	case "string":
		name, err := decodeString(raw)
		if err == nil {
			var a Algorithm
			if a, err = ParseAlgorithm(name); err == nil {
				e := DefaultEntry(a)
				e.Name = name
				return e, nil, true
			}
		}
		p.add(path, err)
		return Entry{}, nil, false
	case "object":
		return p.detailed(path, raw)
	default:
		p.add(path, fmt.Errorf(`must be an algorithm name or an object with "algorithm", not %s`, kind))
		return Entry{}, nil, false
	}
}

func (p *parser) detailed(path string, raw json.RawMessage) (Entry, json.RawMessage, bool) {
	members, err := decodeObject(raw)
	if err != nil {
		p.add(path, err)
		return Entry{}, nil, false
	}
	i := slices.IndexFunc(members, func(m member) bool { return m.key == fieldAlgorithm })
	if i < 0 {
		p.add(path, errors.New(`missing field "algorithm"`))
		return Entry{}, nil, false
	}
	if kind := jsonKind(members[i].value); kind != "string" {
		p.add(joinPath(path, fieldAlgorithm), fmt.Errorf("must be an algorithm name (string), not %s", kind))
		return Entry{}, nil, false
	}
	name, err := decodeString(members[i].value)
	var a Algorithm
	if err == nil {
		a, err = ParseAlgorithm(name)
	}
	if err != nil {
		p.add(joinPath(path, fieldAlgorithm), err)
		return Entry{}, nil, false
	}

	d := entryDecoder{e: DefaultEntry(a)}
	d.e.Name = name
	var unsupported []string
	var nested json.RawMessage
	for _, m := range members {
		switch {
		case m.key == fieldAlgorithm:
		case !supports(a, m.key):
			unsupported = append(unsupported, m.key)
		case m.key == fieldRequestAlgorithms:
			nested = m.value
		default:
			if err := d.set(m.key, m.value); err != nil {
				p.add(joinPath(path, m.key), err)
			}
		}
	}
	if len(unsupported) > 0 {
		slices.Sort(unsupported)
		p.add(path, fmt.Errorf("%s config does not support field(s): %s", a, strings.Join(unsupported, ", ")))
	}
	d.e.HasQueueSLO = d.floorSet && d.ceilSet
	return d.e, nested, true
}

// entryDecoder applies the fields of one detailed object to an entry holding defaults.
type entryDecoder struct {
	e                 Entry
	floorSet, ceilSet bool
}

// set decodes one supported field other than algorithm and request_algorithms. On error
// the entry keeps its default for that field.
func (d *entryDecoder) set(field string, raw json.RawMessage) error {
	e := &d.e
	switch field {
	case "require_cache_affinity_key":
		return assign(&e.RequireCacheAffinityKey, raw, decodeBool)
	case "require_input_tokens":
		return assign(&e.RequireInputTokens, raw, decodeBool)
	case "max_input_work_seconds":
		err := assign(&e.MaxInputWorkSeconds, raw, decodeFloat)
		e.HasMaxInputWork = err == nil
		return err
	case "sample_count":
		return assign(&e.SampleCount, raw, decodeInt)
	case "comparator":
		return assign(&e.Comparator, raw, decodeComparator)
	case "seed":
		return assign(&e.Seed, raw, decodeString)
	case "cache_affinity_virtual_nodes":
		return assign(&e.VirtualNodes, raw, decodeAtLeastOne)
	case "cache_affinity_backend_selection_count":
		return assign(&e.SelectionCount, raw, decodeInt)
	case "cache_affinity_wait_ms":
		return assign(&e.AffinityWait, raw, decodeMillis)
	case "cache_affinity_input_tokens_scale":
		return assign(&e.AffinityInputScale, raw, decodeFloat)
	case fieldQueueFloor:
		err := assign(&e.QueueFloor, raw, decodeMillis)
		d.floorSet = err == nil
		return err
	case fieldQueueCeil:
		err := assign(&e.QueueCeil, raw, decodeMillis)
		d.ceilSet = err == nil
		return err
	case "ttft_bucket_size_ms":
		return assign(&e.BucketSize, raw, decodeMillis)
	case "next_bucket_unlock_factor":
		return assign(&e.UnlockFactor, raw, decodeFloat)
	case "n":
		return assign(&e.N, raw, decodeAtLeastOne)
	case "max_queued":
		return assign(&e.MaxQueued, raw, decodeUint)
	case "ignore_queue_time":
		return assign(&e.IgnoreQueueTime, raw, decodeBool)
	case "ignore_input_processing_time":
		return assign(&e.IgnoreInputProcessingTime, raw, decodeBool)
	case "consider_kv_free_tokens":
		return assign(&e.ConsiderKVFreeTokens, raw, decodeBool)
	case fieldTieTolerance:
		return assign(&e.TieTolerance, raw, decodeMillis)
	case "session_affinity_ttl_ms":
		return assign(&e.SessionTTL, raw, decodeMillis)
	case "session_table_size":
		return assign(&e.SessionTableSize, raw, decodeAtLeastOne)
	case "prefix_affinity":
		return assign(&e.PrefixAffinity, raw, decodeBool)
	case "prefix_index_blocks":
		return assign(&e.PrefixIndexBlocks, raw, decodeAtLeastOne)
	case "prefix_index_ttl_ms":
		return assign(&e.PrefixIndexTTL, raw, decodeMillis)
	case "last_cluster_affinity":
		return assign(&e.LastClusterAffinity, raw, decodeBool)
	case fieldPrefillWait:
		return assign(&e.PrefillWait, raw, decodeBool)
	case "capacity_wait_ms":
		return assign(&e.CapacityWait, raw, decodeMillis)
	case "capacity_wait_order":
		return assign(&e.ShortestFirst, raw, decodeWaitOrder)
	case fieldTTFTCorrection:
		return assign(&e.TTFTCorrection, raw, decodeBool)
	case fieldRendezvousWeight:
		return assign(&e.RendezvousWeight, raw, decodeWeight)
	case fieldBandWiden:
		err := assign(&e.BandWiden, raw, decodeMillis)
		e.HasBandWiden = e.HasBandWiden || err == nil
		return err
	case "fallback_max_queued":
		return assign(&e.FallbackMaxQueued, raw, decodeUint)
	default: // not reachable: supports() admits only the fields above
		return errors.New("unsupported field")
	}
}

// assign decodes raw with decode and stores the value in dst only on success.
func assign[T any](dst *T, raw json.RawMessage, decode func(json.RawMessage) (T, error)) error {
	v, err := decode(raw)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// member is one key/value pair of a JSON object, in document order.
type member struct {
	key   string
	value json.RawMessage
}

// decodeObject splits a valid JSON object into its members, refusing duplicate keys.
func decodeObject(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, err
	}
	var members []member
	seen := map[string]struct{}{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok { // not reachable for valid JSON
			return nil, fmt.Errorf("object key is %v, not a string", tok)
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if _, dup := seen[key]; dup {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = struct{}{}
		members = append(members, member{key: key, value: value})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return members, nil
}

// jsonKind names the type of a JSON value by its first byte.
func jsonKind(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	default:
		return "number"
	}
}

func decodeBool(raw json.RawMessage) (bool, error) {
	if kind := jsonKind(raw); kind != "boolean" {
		return false, fmt.Errorf("must be a boolean, not %s", kind)
	}
	return bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("true")), nil
}

func decodeString(raw json.RawMessage) (string, error) {
	if kind := jsonKind(raw); kind != "string" {
		return "", fmt.Errorf("must be a string, not %s", kind)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

func decodeUint(raw json.RawMessage) (uint64, error) {
	if kind := jsonKind(raw); kind != "number" {
		return 0, fmt.Errorf("must be a non-negative integer, not %s", kind)
	}
	text := string(bytes.TrimSpace(raw))
	v, err := strconv.ParseUint(text, 10, 64)
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("must be at most %d", uint64(math.MaxUint64))
	default:
		return 0, fmt.Errorf("must be a non-negative integer, not %s", text)
	}
}

// decodeInt decodes a non-negative integer into an int, saturating at math.MaxInt.
func decodeInt(raw json.RawMessage) (int, error) {
	v, err := decodeUint(raw)
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt {
		return math.MaxInt, nil
	}
	return int(v), nil
}

// decodeAtLeastOne decodes a count whose configured 0 means 1.
func decodeAtLeastOne(raw json.RawMessage) (int, error) {
	v, err := decodeInt(raw)
	return max(v, 1), err
}

func decodeWeight(raw json.RawMessage) (RendezvousWeight, error) {
	name, err := decodeString(raw)
	if err != nil {
		return WeightDefault, err
	}
	return ParseRendezvousWeight(name)
}

// decodeWaitOrder decodes capacity_wait_order: "arrival" (false) or "shortest" (true).
func decodeWaitOrder(raw json.RawMessage) (bool, error) {
	name, err := decodeString(raw)
	if err != nil {
		return false, err
	}
	switch name {
	case "arrival":
		return false, nil
	case "shortest":
		return true, nil
	}
	return false, fmt.Errorf("must be \"arrival\" or \"shortest\", not %q", name)
}

func decodeComparator(raw json.RawMessage) (load.Comparator, error) {
	name, err := decodeString(raw)
	if err != nil {
		return load.ComparatorNone, err
	}
	return load.ParseComparator(name)
}

// decodeMillis decodes whole milliseconds, saturating at the largest time.Duration.
func decodeMillis(raw json.RawMessage) (time.Duration, error) {
	v, err := decodeUint(raw)
	if err != nil {
		return 0, err
	}
	if v > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64), nil
	}
	return time.Duration(v) * time.Millisecond, nil
}

func decodeFloat(raw json.RawMessage) (float64, error) {
	if kind := jsonKind(raw); kind != "number" {
		return 0, fmt.Errorf("must be a number, not %s", kind)
	}
	text := string(bytes.TrimSpace(raw))
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("must be a finite number, not %s", text)
	}
	return v, nil
}

// Error paths.

func modelPath(id string) string { return "models[" + strconv.Quote(id) + "]" }

func overridePath(parent, key string) string {
	return joinPath(parent, fieldRequestAlgorithms+"["+strconv.Quote(key)+"]")
}

func joinPath(parent, child string) string {
	if parent == "" {
		return child
	}
	return parent + "." + child
}

// appendPrefixed appends each problem, prefixed with path when path is not empty.
func appendPrefixed(errs []error, path string, problems []error) []error {
	for _, err := range problems {
		if path != "" {
			err = fmt.Errorf("%s: %w", path, err)
		}
		errs = append(errs, err)
	}
	return errs
}

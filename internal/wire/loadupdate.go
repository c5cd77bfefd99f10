package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/engines/load"
)

// LoadUpdateContentType is the content type of a load update (LoadUpdate).
const LoadUpdateContentType = "text/x-switchyard-load-update"

// LoadUpdate is a load update: a heartbeat that carries only what changes from one
// heartbeat to the next, each model's stats and build and the dispatch-seq echo. A pylon
// sends it, between full registrations, to a gateway that said in its RegistrationAck
// that it takes them:
//
//	PATCH RegistrationPath+ID, Content-Type: LoadUpdateContentType
//
// with the same credentials as the registration. Anything else changed (a model added,
// retired or of a new generation, a status, the URL, cluster, routing key, heartbeat,
// capabilities or sources) goes in a full registration.
//
// Wire form: a header line, then one line per model, each line ending in '\n' (the last
// one's optional):
//
//	v=1;seq=<dispatch seq>
//	m=<model>;g=<generation>;b=<build>;at=<unix ms>;q=<queue size>;qi=<queued input tokens>;
//	r=<running>;mc=<max concurrency>;tps=<input tps>;pq=<priority>:<ms>,…;otps=<output tps>;
//	motps=<max output tps>;ti=<total input tokens>;ip=<prefill requests>;og=<decode requests>;
//	kvc=<kv capacity>;kvu=<kv used>;kvf=<kv free>
//
// (a model line is one line; wrapped here). The field names are those of x-pylon-load
// where it has them. Every field is required but b (absent: 0, unknown) and pq (absent:
// no estimates; "pq=" an explicit empty map). A field may appear once per line; unknown
// fields are ignored, so fields can be added without a new version. A model name cannot
// hold ';', '\n' or '\r': a pylon with such a model sends full registrations only.
type LoadUpdate struct {
	DispatchSeq uint64
	// Models holds one report per model: Load carries every stats field but Capabilities
	// and Sources (which a full registration sets), and DispatchSeq is the update's.
	Models []LoadReport
}

// ErrBadLoadUpdate classifies load update parse and validation failures.
var ErrBadLoadUpdate = errors.New("invalid load update")

// MaxLoadLineBytes bounds one model line of a load update: a 256-byte model name and 64
// queue estimates take well under half of it.
const MaxLoadLineBytes = 4096

// LoadUpdateOf is the load update of registration snapshot r (its models in name order).
// It reports false when r cannot be sent as one: a model name holds ';', '\n' or '\r', or
// a queue-estimate key is not a priority.
func LoadUpdateOf(r *Registration) (LoadUpdate, bool) {
	u := LoadUpdate{DispatchSeq: r.DispatchSeq, Models: make([]LoadReport, 0, len(r.Models))}
	for name := range r.Models {
		if strings.ContainsAny(name, ";\n\r") {
			return LoadUpdate{}, false
		}
		m := r.Models[name]
		l, err := m.Stats.Load()
		if err != nil {
			return LoadUpdate{}, false
		}
		l.Capabilities, l.Sources = nil, nil
		u.Models = append(u.Models, LoadReport{Model: name, Generation: m.Generation, Build: m.Build, DispatchSeq: r.DispatchSeq, Load: l})
	}
	slices.SortFunc(u.Models, func(a, b LoadReport) int { return strings.Compare(a.Model, b.Model) })
	return u, true
}

// AppendLoadUpdate appends the wire form of u to b. A non-finite or negative throughput
// is written as 0 (as in x-pylon-load); the model names must be sendable (LoadUpdateOf).
func AppendLoadUpdate(b []byte, u *LoadUpdate) []byte {
	b = appendField(append(b, "v=1"...), ";seq=", u.DispatchSeq)
	for i := range u.Models {
		r := &u.Models[i]
		l := &r.Load
		b = append(append(b, "\nm="...), r.Model...)
		b = appendField(b, ";g=", r.Generation)
		if r.Build != 0 {
			b = appendField(b, ";b=", r.Build)
		}
		b = strconv.AppendInt(append(b, ";at="...), l.ObservedAtUnixMilli, 10)
		b = appendField(b, ";q=", l.QueueSize)
		b = appendField(b, ";qi=", l.QueuedInputTokens)
		b = appendField(b, ";r=", l.RunningRequests)
		b = appendField(b, ";mc=", l.MaxEngineConcurrency)
		b = appendRate(b, ";tps=", l.InputTPS)
		if l.QueueEstimates != nil {
			b = appendEstimates(append(b, ";pq="...), l.QueueEstimates)
		}
		b = appendRate(b, ";otps=", l.OutputTPS)
		b = appendRate(b, ";motps=", l.MaxOutputTPS)
		b = appendField(b, ";ti=", l.TotalInputTokens)
		b = appendField(b, ";ip=", l.InputProcessingRequests)
		b = appendField(b, ";og=", l.OutputGenerationRequests)
		b = appendField(b, ";kvc=", l.KVCapacityTokens)
		b = appendField(b, ";kvu=", l.KVUsedTokens)
		b = appendField(b, ";kvf=", l.KVFreeTokens)
	}
	return append(b, '\n')
}

// appendRate appends a throughput field; a value that is not finite and non-negative is
// written as 0.
func appendRate(b []byte, name string, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		v = 0
	}
	return strconv.AppendFloat(append(b, name...), v, 'g', -1, 64)
}

func appendEstimates(b []byte, es []load.PriorityEstimate) []byte {
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(e.Priority), 10)
		b = append(b, ':')
		b = strconv.AppendUint(b, e.QueueMs, 10)
	}
	return b
}

// The fields of a model line, as bits of the set a line has seen.
const (
	lmModel = 1 << iota
	lmGeneration
	lmBuild
	lmAt
	lmQueue
	lmQueuedInput
	lmRunning
	lmMaxConcurrency
	lmTPS
	lmEstimates
	lmOutputTPS
	lmMaxOutputTPS
	lmTotalInput
	lmPrefilling
	lmDecoding
	lmKVCapacity
	lmKVUsed
	lmKVFree

	lmRequired = lmModel | lmGeneration | lmAt | lmQueue | lmQueuedInput | lmRunning | lmMaxConcurrency | lmTPS |
		lmOutputTPS | lmMaxOutputTPS | lmTotalInput | lmPrefilling | lmDecoding | lmKVCapacity | lmKVUsed | lmKVFree
)

// lineFieldNames names the model-line fields by bit number (for errors).
var lineFieldNames = [...]string{"m", "g", "b", "at", "q", "qi", "r", "mc", "tps", "pq", "otps", "motps", "ti", "ip", "og", "kvc", "kvu", "kvf"}

// ParseLoadUpdate decodes and validates a load update body against l: the header line
// with v=1 and seq, then at most MaxModels model lines of at most MaxLoadLineBytes each,
// every required field present once and well formed, each model once, names within
// MaxModelBytes and printable, throughputs finite and 0 or more, max_engine_concurrency,
// the queue estimates and their number within their limits, priorities ascending. A body
// over MaxBodyBytes is refused unread. Errors wrap ErrBadLoadUpdate and name the line and
// field at fault.
func (l Limits) ParseLoadUpdate(body []byte) (LoadUpdate, error) {
	l = l.withDefaults()
	if len(body) > l.MaxBodyBytes {
		return LoadUpdate{}, fmt.Errorf("%w: the body is %d bytes, over the limit of %d", ErrBadLoadUpdate, len(body), l.MaxBodyBytes)
	}
	header, rest, _ := bytes.Cut(body, []byte{'\n'})
	u, err := parseLoadHeader(header)
	if err != nil {
		return LoadUpdate{}, err
	}
	n := bytes.Count(rest, []byte{'\n'})
	if len(rest) > 0 && rest[len(rest)-1] != '\n' {
		n++
	}
	if n > l.MaxModels {
		return LoadUpdate{}, fmt.Errorf("%w: %d models, over the limit of %d per backend", ErrBadLoadUpdate, n, l.MaxModels)
	}
	u.Models = make([]LoadReport, 0, n)
	var names map[string]struct{} // with many models, to find one listed twice
	if n > 8 {
		names = make(map[string]struct{}, n)
	}
	for i := 2; len(rest) > 0; i++ {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		r, err := l.parseModelLine(line)
		if err != nil {
			return LoadUpdate{}, fmt.Errorf("%w: line %d: %w", ErrBadLoadUpdate, i, err)
		}
		if listed(u.Models, names, r.Model) {
			return LoadUpdate{}, fmt.Errorf("%w: line %d: model %s is listed twice", ErrBadLoadUpdate, i, quote(r.Model))
		}
		r.DispatchSeq = u.DispatchSeq
		u.Models = append(u.Models, r)
	}
	return u, nil
}

// listed reports whether model is already among ms, adding it to names when names is
// not nil (ms is then not searched).
func listed(ms []LoadReport, names map[string]struct{}, model string) bool {
	if names != nil {
		if _, ok := names[model]; ok {
			return true
		}
		names[model] = struct{}{}
		return false
	}
	return slices.ContainsFunc(ms, func(r LoadReport) bool { return r.Model == model })
}

// parseLoadHeader decodes the header line: v=1 and seq, once each.
func parseLoadHeader(line []byte) (LoadUpdate, error) {
	var u LoadUpdate
	version, seq := false, false
	for s := string(line); s != ""; {
		var field string
		field, s, _ = strings.Cut(s, ";")
		name, value, ok := strings.Cut(field, "=")
		if !ok {
			return LoadUpdate{}, fmt.Errorf("%w: line 1: field %s has no value", ErrBadLoadUpdate, quote(field))
		}
		switch name {
		case "v":
			if version || value != "1" {
				return LoadUpdate{}, fmt.Errorf("%w: line 1: v=%s: the version must be 1, given once", ErrBadLoadUpdate, quote(value))
			}
			version = true
		case "seq":
			var err error
			if seq {
				err = errors.New("given twice")
			} else {
				u.DispatchSeq, err = strconv.ParseUint(value, 10, 64)
			}
			if err != nil {
				return LoadUpdate{}, fmt.Errorf("%w: line 1: field seq: %w", ErrBadLoadUpdate, clipError(err))
			}
			seq = true
		default:
		}
	}
	if !version || !seq {
		return LoadUpdate{}, fmt.Errorf("%w: line 1 must be the header v=1;seq=<dispatch seq>", ErrBadLoadUpdate)
	}
	return u, nil
}

// parseModelLine decodes and validates one model line.
func (l Limits) parseModelLine(line []byte) (LoadReport, error) {
	if len(line) > MaxLoadLineBytes {
		return LoadReport{}, fmt.Errorf("%d bytes, over the limit of %d", len(line), MaxLoadLineBytes)
	}
	var r LoadReport
	seen := 0
	for s := string(line); s != ""; {
		var field string
		field, s, _ = strings.Cut(s, ";")
		name, value, ok := strings.Cut(field, "=")
		if !ok {
			return LoadReport{}, fmt.Errorf("field %s has no value", quote(field))
		}
		bit, err := l.modelField(&r, name, value)
		if err != nil {
			return LoadReport{}, fmt.Errorf("field %s: %w", name, clipError(err))
		}
		if seen&bit != 0 {
			return LoadReport{}, fmt.Errorf("field %s is given twice", name)
		}
		seen |= bit
	}
	if missing := lmRequired &^ seen; missing != 0 {
		var names []string
		for i, name := range lineFieldNames {
			if missing&(1<<i) != 0 {
				names = append(names, name)
			}
		}
		return LoadReport{}, fmt.Errorf("missing %s", strings.Join(names, ", "))
	}
	return r, nil
}

// modelField sets the field name of r from value and returns its bit (0: unknown field,
// ignored).
func (l Limits) modelField(r *LoadReport, name, value string) (int, error) {
	ld := &r.Load
	var err error
	switch name {
	case "m":
		var p problems
		if value == "" {
			return 0, errors.New("the model name is empty")
		}
		if !l.checkText(&p, "model name", value, l.MaxModelBytes, true, false) {
			return 0, p.errs[0]
		}
		r.Model = value
		return lmModel, nil
	case "g":
		r.Generation, err = strconv.ParseUint(value, 10, 64)
		return lmGeneration, err
	case "b":
		r.Build, err = strconv.ParseUint(value, 10, 64)
		return lmBuild, err
	case "at":
		ld.ObservedAtUnixMilli, err = strconv.ParseInt(value, 10, 64)
		if err == nil && ld.ObservedAtUnixMilli < 0 {
			err = errors.New("must not be negative")
		}
		return lmAt, err
	case "q":
		ld.QueueSize, err = strconv.ParseUint(value, 10, 64)
		return lmQueue, err
	case "qi":
		ld.QueuedInputTokens, err = strconv.ParseUint(value, 10, 64)
		return lmQueuedInput, err
	case "r":
		ld.RunningRequests, err = strconv.ParseUint(value, 10, 64)
		return lmRunning, err
	case "mc":
		ld.MaxEngineConcurrency, err = strconv.ParseUint(value, 10, 64)
		if err == nil && ld.MaxEngineConcurrency > l.MaxEngineConcurrency {
			err = fmt.Errorf("%d is over the limit of %d", ld.MaxEngineConcurrency, l.MaxEngineConcurrency)
		}
		return lmMaxConcurrency, err
	case "tps":
		ld.InputTPS, err = parseRate(value)
		return lmTPS, err
	case "pq":
		ld.QueueEstimates, err = l.parseEstimates(value)
		return lmEstimates, err
	case "otps":
		ld.OutputTPS, err = parseRate(value)
		return lmOutputTPS, err
	case "motps":
		ld.MaxOutputTPS, err = parseRate(value)
		return lmMaxOutputTPS, err
	case "ti":
		ld.TotalInputTokens, err = strconv.ParseUint(value, 10, 64)
		return lmTotalInput, err
	case "ip":
		ld.InputProcessingRequests, err = strconv.ParseUint(value, 10, 64)
		return lmPrefilling, err
	case "og":
		ld.OutputGenerationRequests, err = strconv.ParseUint(value, 10, 64)
		return lmDecoding, err
	case "kvc":
		ld.KVCapacityTokens, err = strconv.ParseUint(value, 10, 64)
		return lmKVCapacity, err
	case "kvu":
		ld.KVUsedTokens, err = strconv.ParseUint(value, 10, 64)
		return lmKVUsed, err
	case "kvf":
		ld.KVFreeTokens, err = strconv.ParseUint(value, 10, 64)
		return lmKVFree, err
	default:
		return 0, nil
	}
}

// parseRate parses a throughput: a finite number, 0 or more.
func parseRate(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err == nil && (math.IsNaN(f) || math.IsInf(f, 0) || f < 0) {
		err = errors.New("must be a finite number, 0 or more")
	}
	return f, err
}

// parseEstimates parses a queue-estimate map within l's limits.
func (l Limits) parseEstimates(v string) ([]load.PriorityEstimate, error) {
	if n := strings.Count(v, ",") + 1; v != "" && n > l.MaxEstimates {
		return nil, fmt.Errorf("%d entries, over the limit of %d", n, l.MaxEstimates)
	}
	es, err := parsePriorityMap(v)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if e.QueueMs > l.MaxEstimateMs {
			return nil, fmt.Errorf("priority %d: %d ms is over the limit of %d ms", e.Priority, e.QueueMs, l.MaxEstimateMs)
		}
	}
	return es, nil
}

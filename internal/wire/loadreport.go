package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/engines/load"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// LoadReport is the compact x-pylon-load header a pylon adds to every response: the
// routing-relevant load of the request's model right now and the highest dispatch sequence
// the pylon has admitted from the gateway that sent the request.
//
// Wire form: "v=1;m=<model>;g=<generation>;q=<queue size>;qi=<queued input tokens>;
// r=<running>;mc=<max concurrency>;tps=<input tps>;at=<unix ms>;seq=<dispatch seq>;
// b=<build>;pq=<priority>:<ms>,<priority>:<ms>" (pq absent = no map, "pq=" = explicit
// empty map; b absent = 0).
type LoadReport struct {
	Model       string
	Generation  uint64
	Load        load.Load // only the routing fields are carried
	DispatchSeq uint64
	// Build numbers the pylon's snapshots of the model's generation (1, 2, …; 0 =
	// unknown): it orders two snapshots taken in the same millisecond, which the
	// observation time cannot.
	Build uint64
}

// Supersedes reports whether r may replace a view last updated from a report or
// registration with dispatch-sequence echo seqEcho, observation time observedAtMs and
// snapshot build (0 = unknown): responses and registrations arrive out of order, and an
// older snapshot must not overwrite a newer one. With both builds known the build decides
// (a pylon reads the seq after fixing the build, so an equal build with a higher seq is
// the same snapshot seen later); otherwise the seq and the observation time must not go
// back.
func (r *LoadReport) Supersedes(seqEcho uint64, observedAtMs int64, build uint64) bool {
	if r.Build != 0 && build != 0 {
		return r.Build > build || (r.Build == build && r.DispatchSeq >= seqEcho)
	}
	return r.DispatchSeq >= seqEcho && r.Load.ObservedAtUnixMilli >= observedAtMs
}

// Replaces reports whether r should take the place of prev, a report of the same model
// not applied yet: one of a newer generation always does (builds restart with each
// generation, and generations only grow), one of an older generation never; within a
// generation Supersedes decides.
func (r *LoadReport) Replaces(prev *LoadReport) bool {
	if r.Generation != prev.Generation {
		return r.Generation > prev.Generation
	}
	return r.Supersedes(prev.DispatchSeq, prev.Load.ObservedAtUnixMilli, prev.Build)
}

// Registered returns a model's view once the registration snapshot r arrives at a view
// that holds cur. Registrations race the responses: when a report of a later snapshot of
// the same generation has already arrived, the view keeps what that report carries and
// takes only the rest (KV, output throughput, …) from r. A registration without a
// dispatch seq (0: no echo yet) is not ordered by it, and the view's echo never goes back.
func (r *LoadReport) Registered(cur *LoadReport) LoadReport {
	next := *r
	if next.DispatchSeq == 0 {
		next.DispatchSeq = cur.DispatchSeq
	}
	if r.Generation == cur.Generation && !next.Supersedes(cur.DispatchSeq, cur.Load.ObservedAtUnixMilli, cur.Build) {
		cur.MergeInto(&next.Load)
		next.Build = cur.Build
	}
	next.DispatchSeq = max(next.DispatchSeq, cur.DispatchSeq)
	return next
}

// MergeInto copies the fields the report carries (exactly those of the wire form) into l,
// leaving the fields only a full registration carries (KV, output throughput, …) as they are.
func (r *LoadReport) MergeInto(l *load.Load) {
	l.QueueSize, l.QueuedInputTokens, l.RunningRequests = r.Load.QueueSize, r.Load.QueuedInputTokens, r.Load.RunningRequests
	l.MaxEngineConcurrency, l.InputTPS, l.ObservedAtUnixMilli = r.Load.MaxEngineConcurrency, r.Load.InputTPS, r.Load.ObservedAtUnixMilli
	l.QueueEstimates = r.Load.QueueEstimates
}

// AppendLoadReport appends the wire form of r to b.
func AppendLoadReport(b []byte, r *LoadReport) []byte {
	b = append(b, "v=1;m="...)
	b = append(b, r.Model...)
	b = appendField(b, ";g=", r.Generation)
	b = appendField(b, ";q=", r.Load.QueueSize)
	b = appendField(b, ";qi=", r.Load.QueuedInputTokens)
	b = appendField(b, ";r=", r.Load.RunningRequests)
	b = appendField(b, ";mc=", r.Load.MaxEngineConcurrency)
	b = append(b, ";tps="...)
	tps := r.Load.InputTPS
	if math.IsNaN(tps) || math.IsInf(tps, 0) {
		tps = 0
	}
	b = strconv.AppendFloat(b, tps, 'g', -1, 64)
	b = append(b, ";at="...)
	b = strconv.AppendInt(b, r.Load.ObservedAtUnixMilli, 10)
	b = appendField(b, ";seq=", r.DispatchSeq)
	if r.Build != 0 {
		b = appendField(b, ";b=", r.Build)
	}
	if r.Load.QueueEstimates != nil {
		b = append(b, ";pq="...)
		for i, e := range r.Load.QueueEstimates {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(e.Priority), 10)
			b = append(b, ':')
			b = strconv.AppendUint(b, e.QueueMs, 10)
		}
	}
	return b
}

func appendField(b []byte, name string, v uint64) []byte {
	return strconv.AppendUint(append(b, name...), v, 10)
}

// ErrBadLoadReport classifies x-pylon-load parse failures.
var ErrBadLoadReport = errors.New("invalid x-pylon-load")

// ParseLoadReport decodes the wire form. Unknown fields are ignored (forward compatible);
// a malformed known field (a tps that is NaN, infinite or negative included) is an error
// wrapping ErrBadLoadReport.
func ParseLoadReport(s string) (LoadReport, error) {
	var r LoadReport
	version := false
	for s != "" {
		var field string
		field, s, _ = strings.Cut(s, ";")
		name, value, ok := strings.Cut(field, "=")
		if !ok {
			return LoadReport{}, fmt.Errorf("%w: field %q has no value", ErrBadLoadReport, field)
		}
		var err error
		switch name {
		case "v":
			version = value == "1"
			if !version {
				return LoadReport{}, fmt.Errorf("%w: unsupported version %q", ErrBadLoadReport, value)
			}
		case "m":
			r.Model = value
		case "g":
			r.Generation, err = strconv.ParseUint(value, 10, 64)
		case "q":
			r.Load.QueueSize, err = strconv.ParseUint(value, 10, 64)
		case "qi":
			r.Load.QueuedInputTokens, err = strconv.ParseUint(value, 10, 64)
		case "r":
			r.Load.RunningRequests, err = strconv.ParseUint(value, 10, 64)
		case "mc":
			r.Load.MaxEngineConcurrency, err = strconv.ParseUint(value, 10, 64)
		case "tps":
			r.Load.InputTPS, err = strconv.ParseFloat(value, 64)
			if tps := r.Load.InputTPS; err == nil && (math.IsNaN(tps) || math.IsInf(tps, 0) || tps < 0) {
				err = errors.New("must be a finite number, 0 or more")
			}
		case "at":
			r.Load.ObservedAtUnixMilli, err = strconv.ParseInt(value, 10, 64)
		case "seq":
			r.DispatchSeq, err = strconv.ParseUint(value, 10, 64)
		case "b":
			r.Build, err = strconv.ParseUint(value, 10, 64)
		case "pq":
			r.Load.QueueEstimates, err = parsePriorityMap(value)
		default:
		}
		if err != nil {
			return LoadReport{}, fmt.Errorf("%w: field %s: %w", ErrBadLoadReport, name, err)
		}
	}
	if !version {
		return LoadReport{}, fmt.Errorf("%w: missing v=1", ErrBadLoadReport)
	}
	return r, nil
}

func parsePriorityMap(v string) ([]load.PriorityEstimate, error) {
	out := []load.PriorityEstimate{}
	for v != "" {
		var entry string
		entry, v, _ = strings.Cut(v, ",")
		ps, ms, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, fmt.Errorf("entry %q is not priority:ms", entry)
		}
		p, err := strconv.ParseUint(ps, 10, 32)
		if err != nil {
			return nil, err
		}
		q, err := strconv.ParseUint(ms, 10, 64)
		if err != nil {
			return nil, err
		}
		if n := len(out); n > 0 && uint64(out[n-1].Priority) >= p {
			return nil, fmt.Errorf("priorities must ascend (%d after %d)", p, out[n-1].Priority)
		}
		out = append(out, load.PriorityEstimate{Priority: uint32(p), QueueMs: q})
	}
	return out, nil
}

// ParseDispatchSeq splits an x-switchyard-dispatch-seq value.
func ParseDispatchSeq(v string) (gatewayID string, seq uint64, err error) {
	i := strings.LastIndexByte(v, '/')
	if i <= 0 {
		return "", 0, fmt.Errorf("dispatch seq %q is not <gateway id>/<seq>", v)
	}
	seq, err = strconv.ParseUint(v[i+1:], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("dispatch seq %q: %w", v, err)
	}
	return v[:i], seq, nil
}

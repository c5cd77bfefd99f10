// Package admission is the pylon's local queue admission: it compares the gateway's
// expected queue delay with the pylon's own estimate and rejects a request whose local
// queue is clearly longer than the gateway thought. Pure: values in, a decision with its
// reason out.
package admission

import (
	"math"

	"github.com/switchyard/switchyard/engines/load"
)

// Defaults of the admission tolerances.
const (
	DefaultMinDeltaMs = 25
	DefaultTolerance  = 1.25
)

// Config is the admission policy.
type Config struct {
	// Enabled turns admission on; when off every decision is Disabled (accept).
	Enabled bool
	// MinDeltaMs is the additive tolerance in milliseconds (default 25 from the CLI).
	MinDeltaMs uint64
	// Tolerance is the multiplicative tolerance; non-finite or ≤ 0 means 1.0.
	Tolerance float64
}

// Result classifies one admission decision (the metric label).
type Result uint8

// The admission results. Only Rejected refuses the request.
const (
	Accepted Result = iota
	Rejected
	MissingEstimate
	UnknownLocalEstimate
	Disabled
)

var resultNames = [...]string{
	Accepted:             "accepted",
	Rejected:             "rejected",
	MissingEstimate:      "missing_estimate",
	UnknownLocalEstimate: "unknown_local_estimate",
	Disabled:             "disabled",
}

// Results lists every result (for pre-creating metric series).
var Results = []Result{Accepted, Rejected, MissingEstimate, UnknownLocalEstimate, Disabled}

// String returns the metric label of r.
func (r Result) String() string {
	if int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "unknown"
}

// Decision is the outcome of one admission check. The millisecond figures are filled in
// when they were computed (ActualMs and ThresholdMs only for Accepted and Rejected).
type Decision struct {
	Result      Result
	ExpectedMs  uint64
	ActualMs    uint64
	ThresholdMs uint64
}

// Admit reports whether the request may proceed.
func (d Decision) Admit() bool { return d.Result != Rejected }

// Threshold is max(expected + minDelta, ceil(expected × tolerance)), saturating.
func (c Config) Threshold(expectedMs uint64) uint64 {
	add := expectedMs + c.MinDeltaMs
	if add < expectedMs {
		add = math.MaxUint64
	}
	tol := c.Tolerance
	if math.IsNaN(tol) || math.IsInf(tol, 0) || tol <= 0 {
		tol = 1
	}
	mul := math.Ceil(float64(expectedMs) * tol)
	var m uint64
	if mul >= math.MaxUint64 {
		m = math.MaxUint64
	} else {
		m = uint64(mul)
	}
	return max(add, m)
}

// Decide checks a request of the given priority against others, the load of every live
// request of the model EXCLUDING the incoming one. expectedMs is the gateway's
// x-stargate-expected-queue-ms; hasExpected is false when the header was missing or bad.
//
// The local estimate is 0 when the free-slot rule holds (a known engine limit above the
// live requests other than this one); otherwise it is others' queue estimate for the
// priority (prompt work at or below it over the input throughput), which is unknown when
// there is work and no valid throughput.
func Decide(c Config, expectedMs uint64, hasExpected bool, others *load.Load, priority uint32) Decision {
	if !c.Enabled {
		return Decision{Result: Disabled}
	}
	if !hasExpected {
		return Decision{Result: MissingEstimate}
	}
	d := Decision{ExpectedMs: expectedMs, ThresholdMs: c.Threshold(expectedMs)}
	if !others.HasFreeSlot() {
		q, ok := others.QueueEstimate(priority)
		if !ok {
			return Decision{Result: UnknownLocalEstimate, ExpectedMs: expectedMs}
		}
		d.ActualMs = ceilMs(q)
	}
	if d.ActualMs > d.ThresholdMs {
		d.Result = Rejected
	} else {
		d.Result = Accepted
	}
	return d
}

// ceilMs converts an estimate to whole milliseconds, rounding up and saturating.
func ceilMs(q load.Millis) uint64 {
	v := math.Ceil(float64(q))
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= math.MaxUint64:
		return math.MaxUint64
	default:
		return uint64(v)
	}
}

// Package admission is the pylon's local queue admission: it compares the gateway's
// expected queue delay with the pylon's own estimate and rejects a request whose local
// queue is clearly longer than the gateway thought. Pure: values in, a decision with its
// reason out.
package admission

import (
	"math"
	"time"

	"github.com/switchyard/switchyard/engines/load"
)

// Defaults of the admission tolerances, and of the wait past a slot share.
const (
	DefaultMinDeltaMs    = 25
	DefaultTolerance     = 1.25
	DefaultSlotShareWait = 30 * time.Second
)

// Config is the admission policy.
type Config struct {
	// Enabled turns admission on; when off every decision is Disabled (accept).
	Enabled bool
	// MinDeltaMs is the additive tolerance in milliseconds (default 25 from the CLI).
	MinDeltaMs uint64
	// Tolerance is the multiplicative tolerance; non-finite or ≤ 0 means 1.0.
	Tolerance float64
	// RequireFreeSlot rejects a request the gateway expected no queue for (0 ms) when the
	// engine has no free slot: it would wait for one of the running requests to end, a
	// wait no queue estimate prices (they price prompt work), so no tolerance catches it.
	// Several gateways (or pylons in front of one engine) that each saw the last slot
	// free send such requests; refused, they are retried elsewhere at once.
	RequireFreeSlot bool
	// SlotShare, when positive, is the number of the engine's concurrency slots this pylon
	// may fill, for an engine that several pylons front: with RequireFreeSlot, a request
	// expected to queue 0 ms is also refused while the pylon's own live requests fill its
	// share. Its own count is exact where the engine's is late (another pylon's admissions
	// reach the engine's figures some milliseconds after the fact), so pylons whose shares
	// add up to the engine's limit never fill it past that limit between them, however
	// many gateways route to them. 0: the whole engine, by the engine's figures alone.
	SlotShare uint64
	// SlotShareWait bounds how long an admitted request that would take the pylon past its
	// SlotShare (one the gateway priced with a queue, or sent without an estimate: its last
	// attempt) waits in the pylon for one of its own requests at the engine to finish; it
	// then goes on to the engine regardless. 0: no wait (the engine queues it).
	SlotShareWait time.Duration
}

// HoldsPastShare reports that a request just admitted is held back from the engine (it
// waits in the pylon for room in the share, at most SlotShareWait): with it, the pylon's
// own requests at the engine, those not held themselves, exceed its SlotShare. Only a
// request the share did not refuse gets here: one priced with a queue, or sent without an
// estimate.
func (c Config) HoldsPastShare(atEngine uint64) bool {
	return c.SlotShare > 0 && c.SlotShareWait > 0 && atEngine > c.SlotShare
}

// ShareHasRoom reports that a held request may go on: the pylon's own requests at the
// engine leave a slot of its share free.
func (c Config) ShareHasRoom(atEngine uint64) bool { return !load.SlotsTaken(atEngine, c.SlotShare) }

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
	// NoFreeSlot marks a rejection by Config.RequireFreeSlot alone (the estimate was
	// within the threshold); Running and Concurrency are then the engine's running
	// requests and its concurrency limit, or, with Share, the pylon's own live requests
	// and its slot share (Config.SlotShare).
	NoFreeSlot           bool
	Share                bool
	Running, Concurrency uint64
}

// Slots is what the free-slot rule counts besides the incoming request: the requests
// running at the engine, all of them (the load Decide compares with may leave out some the
// gateway could not count: its own later dispatches), and the pylon's own live requests.
type Slots struct {
	EngineRunning uint64
	Own           uint64
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
// request of the model EXCLUDING the incoming one, as the gateway could have known it,
// and slots the running and own live requests besides this one (see Slots). expectedMs
// is the gateway's x-stargate-expected-queue-ms; hasExpected is false when the header was
// missing or bad.
//
// The local estimate is 0 when the free-slot rule holds (a known engine limit above the
// live requests other than this one); otherwise it is others' queue estimate for the
// priority (prompt work at or below it over the input throughput), which is unknown when
// there is work and no valid throughput. With c.RequireFreeSlot, an expectation of 0 ms
// is rejected when the engine's running requests reach its known concurrency limit, or the
// pylon's own live requests its slot share (c.SlotShare), whatever the estimate (known or
// not).
func Decide(c Config, expectedMs uint64, hasExpected bool, others *load.Load, slots Slots, priority uint32) Decision {
	if !c.Enabled {
		return Decision{Result: Disabled}
	}
	if !hasExpected {
		return Decision{Result: MissingEstimate}
	}
	d := Decision{ExpectedMs: expectedMs, ThresholdMs: c.Threshold(expectedMs)}
	var noSlot, share bool
	if c.RequireFreeSlot && expectedMs == 0 {
		share = load.SlotsTaken(slots.Own, c.SlotShare)
		noSlot = share || load.SlotsTaken(slots.EngineRunning, others.MaxEngineConcurrency)
	}
	if !others.HasFreeSlot() {
		q, ok := others.QueueEstimate(priority)
		if !ok && !noSlot {
			return Decision{Result: UnknownLocalEstimate, ExpectedMs: expectedMs}
		}
		d.ActualMs = ceilMs(q)
	}
	switch {
	case d.ActualMs > d.ThresholdMs:
		d.Result = Rejected
	case share:
		d.Result, d.NoFreeSlot, d.Share, d.Running, d.Concurrency = Rejected, true, true, slots.Own, c.SlotShare
	case noSlot:
		d.Result, d.NoFreeSlot, d.Running, d.Concurrency = Rejected, true, slots.EngineRunning, others.MaxEngineConcurrency
	default:
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

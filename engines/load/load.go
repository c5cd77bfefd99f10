package load

import (
	"math"
	"time"
)

// Millis is a duration in float64 milliseconds. +Inf means "never" (for example prefill of
// nonzero work on an engine without a valid throughput).
type Millis float64

// Infinite is the estimate of work that can never complete.
var Infinite = Millis(math.Inf(1))

// IsFinite reports whether m is a real duration (not ±Inf, not NaN).
func (m Millis) IsFinite() bool { return !math.IsInf(float64(m), 0) && !math.IsNaN(float64(m)) }

// Duration converts m to a time.Duration, rounding up to the next nanosecond; non-finite
// or overflowing values saturate at the largest duration.
func (m Millis) Duration() time.Duration {
	ns := math.Ceil(float64(m) * float64(time.Millisecond))
	switch {
	case math.IsNaN(ns) || ns >= math.MaxInt64:
		return time.Duration(math.MaxInt64)
	case ns <= 0:
		return 0
	default:
		return time.Duration(ns)
	}
}

// MillisOf converts a duration to Millis.
func MillisOf(d time.Duration) Millis { return Millis(float64(d) / float64(time.Millisecond)) }

// PriorityEstimate is one entry of the per-priority queue estimate map: requests of priority
// Priority (lower = more urgent) expect to queue QueueMs milliseconds.
type PriorityEstimate struct {
	Priority uint32
	QueueMs  uint64
}

// Load is one engine's (or one aggregated cluster's) load as routing sees it: the 17 stats
// fields a pylon publishes per model (control.Stats on the wire). The zero value is an idle
// engine with unknown throughput.
type Load struct {
	InputTPS                 float64 // last_mean_input_tps; usable only when ValidTPS
	OutputTPS                float64 // smoothed decode throughput
	MaxOutputTPS             float64 // max observed decode throughput
	QueueSize                uint64  // requests not yet producing output
	QueuedInputTokens        uint64  // prompt tokens of those requests
	RunningRequests          uint64  // all live requests (num_running_queries)
	MaxEngineConcurrency     uint64  // 0 = unknown / unbounded
	TotalInputTokens         uint64  // prompt tokens of all live requests
	InputProcessingRequests  uint64
	OutputGenerationRequests uint64
	KVCapacityTokens         uint64
	KVUsedTokens             uint64
	KVFreeTokens             uint64
	ObservedAtUnixMilli      int64
	// QueueEstimates is sorted by ascending priority. Empty means "derive the estimate from
	// QueuedInputTokens and InputTPS".
	QueueEstimates []PriorityEstimate
	Capabilities   []string
	Sources        []string
	// MaxInputTPS is the peak mean input throughput seen for the model (0 = none): not
	// published; the gateway keeps it per backend from the reports, as the pulsar
	// ranking's default weight.
	MaxInputTPS float64
	// RequestInputTPS is the rate one request's own prompt is prefilled at: the mean valid
	// input throughput of a cluster's backends (one backend serves the request), set by
	// cluster aggregation when the cluster has several; 0 means InputTPS. Not published.
	RequestInputTPS float64
}

// ValidTPS reports whether a throughput is usable: finite and positive.
func ValidTPS(tps float64) bool { return tps > 0 && !math.IsInf(tps, 1) }

// WorkTime is the time to process work tokens at rate tokens/s: 0 for no work, +Inf for
// work on an invalid rate.
func WorkTime(work, tps float64) Millis {
	if work == 0 {
		return 0
	}
	if !ValidTPS(tps) {
		return Infinite
	}
	return Millis(work / tps * 1000)
}

// ceilWorkMs is ceil(work / tps × 1000) in whole milliseconds, saturating; ok is false when
// the rate is invalid and there is work.
func ceilWorkMs(work uint64, tps float64) (ms uint64, ok bool) {
	if work == 0 {
		return 0, true
	}
	if !ValidTPS(tps) {
		return 0, false
	}
	v := math.Ceil(float64(work) / tps * 1000)
	if v >= math.MaxUint64 {
		return math.MaxUint64, true
	}
	return uint64(v), true
}

// QueueEstimate is the published queue estimate for a request of the given priority,
// without the free-slot rule. With a non-empty estimate map it is the entry with the
// greatest priority at or below the request's (0 when none is); with an empty map it is
// ceil(queued tokens / tps × 1000). known is false for a nonzero backlog on an invalid
// throughput.
func (l *Load) QueueEstimate(priority uint32) (queue Millis, known bool) {
	if len(l.QueueEstimates) > 0 {
		var ms uint64
		for _, e := range l.QueueEstimates {
			if e.Priority > priority {
				break
			}
			ms = e.QueueMs
		}
		return Millis(ms), true
	}
	ms, ok := ceilWorkMs(l.QueuedInputTokens, l.InputTPS)
	return Millis(ms), ok
}

// HasFreeSlot reports the free-slot rule: a known engine concurrency limit above the
// running count (which includes routing reservations).
func (l *Load) HasFreeSlot() bool {
	return l.MaxEngineConcurrency > 0 && l.RunningRequests < l.MaxEngineConcurrency
}

// SlotsTaken reports that running requests take every slot of a known concurrency limit
// (a limit of 0 is unknown: its slots are never all taken).
func SlotsTaken(running, limit uint64) bool { return limit > 0 && running >= limit }

// Full reports that the engine runs its known concurrency limit: no free slot, and the
// limit is known (HasFreeSlot is false for an unknown limit too).
func (l *Load) Full() bool { return SlotsTaken(l.RunningRequests, l.MaxEngineConcurrency) }

// EffectiveQueue is the queue delay a new request of the given priority expects: 0 when the
// engine has a free slot, else the queue estimate, else (unknown estimate) the time of the
// queued work, which is +Inf.
func (l *Load) EffectiveQueue(priority uint32) Millis {
	if l.HasFreeSlot() {
		return 0
	}
	if q, ok := l.QueueEstimate(priority); ok {
		return q
	}
	return WorkTime(float64(l.QueuedInputTokens), l.InputTPS)
}

// Prefill is the time to process scale × inputTokens prompt tokens of one request: at
// RequestInputTPS when it is set (a cluster of several backends, whose summed InputTPS is
// the rate its queue drains at, not the rate one backend prefills one prompt at), else at
// InputTPS. Scale never makes an engine without valid throughput usable: nonzero input
// there is +Inf even at scale 0.
func (l *Load) Prefill(inputTokens uint64, scale float64) Millis {
	if inputTokens == 0 {
		return 0
	}
	if !ValidTPS(l.InputTPS) {
		return Infinite
	}
	tps := l.InputTPS
	if ValidTPS(l.RequestInputTPS) {
		tps = l.RequestInputTPS
	}
	return Millis(scale * float64(inputTokens) / tps * 1000)
}

// Estimate is the TTFT estimate of one request on one engine.
type Estimate struct {
	TTFT       Millis // bucket value: RTT + queue + scaled prefill, minus ignored terms
	Comparator Millis // RTT + queue + scaled prefill, always (used by the ttft comparator)
	Queue      Millis // effective queue delay (free-slot rule applied)
	Prefill    Millis // scaled prefill of the request
}

// Ignore selects TTFT terms left out of the bucket value.
type Ignore struct {
	Queue   bool // ignore_queue_time
	Prefill bool // ignore_input_processing_time
}

// Estimate computes the TTFT components of a request with inputTokens at priority on this
// engine, with round trip rtt and prefill scale (1 outside affinity selection).
func (l *Load) Estimate(rtt Millis, inputTokens uint64, priority uint32, scale float64, ignore Ignore) Estimate {
	e := Estimate{Queue: l.EffectiveQueue(priority), Prefill: l.Prefill(inputTokens, scale)}
	e.Comparator = rtt + e.Queue + e.Prefill
	e.TTFT = rtt
	if !ignore.Queue {
		e.TTFT += e.Queue
	}
	if !ignore.Prefill {
		e.TTFT += e.Prefill
	}
	return e
}

// InputWorkSeconds is (queued input + request input) / tps in seconds: +Inf for work on an
// invalid throughput.
func (l *Load) InputWorkSeconds(inputTokens uint64) float64 {
	return float64(WorkTime(float64(l.QueuedInputTokens)+float64(inputTokens), l.InputTPS)) / 1000
}

// Utilization is running / max(1, max concurrency).
func (l *Load) Utilization() float64 {
	return float64(l.RunningRequests) / float64(max(1, l.MaxEngineConcurrency))
}

// HasCapacity is the wait-and-widen capacity check: an unknown concurrency limit always has
// capacity; otherwise running must stay below the limit plus maxQueued (saturating).
func (l *Load) HasCapacity(maxQueued uint64) bool {
	if l.MaxEngineConcurrency == 0 {
		return true
	}
	limit := l.MaxEngineConcurrency + maxQueued
	if limit < l.MaxEngineConcurrency {
		limit = math.MaxUint64
	}
	return l.RunningRequests < limit
}

// ReportsKV reports whether the engine publishes any KV cache figure.
func (l *Load) ReportsKV() bool {
	return l.KVCapacityTokens > 0 || l.KVUsedTokens > 0 || l.KVFreeTokens > 0
}

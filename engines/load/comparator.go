package load

import "fmt"

// Comparator names a way to rank candidates (lower score is better).
type Comparator uint8

// The comparators of the reference (kebab-case names on the wire). ComparatorNone is the
// implicit "least queue, then least percent used" rule of pulsar-wait-and-widen; it has no
// wire name and cannot be configured.
const (
	ComparatorNone Comparator = iota
	ComparatorTTFT
	ComparatorQueueTime
	ComparatorInputWorkSeconds
	ComparatorUtilization
	ComparatorNumRequestsQueued
)

var comparatorNames = [...]string{
	ComparatorNone:              "none",
	ComparatorTTFT:              "ttft",
	ComparatorQueueTime:         "queue-time",
	ComparatorInputWorkSeconds:  "input-work-seconds",
	ComparatorUtilization:       "utilization",
	ComparatorNumRequestsQueued: "num-requests-queued",
}

// String returns the comparator's wire name.
func (c Comparator) String() string {
	if int(c) < len(comparatorNames) {
		return comparatorNames[c]
	}
	return fmt.Sprintf("comparator(%d)", uint8(c))
}

// ParseComparator resolves a configured comparator name. "none" is not accepted: it is an
// internal rule, not a configurable comparator.
func ParseComparator(name string) (Comparator, error) {
	for c := ComparatorTTFT; c <= ComparatorNumRequestsQueued; c++ {
		if comparatorNames[c] == name {
			return c, nil
		}
	}
	return ComparatorNone, fmt.Errorf("unknown comparator %q (want one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued)", name)
}

// Score is the comparator's score of a request on an engine (lower is better). est must be
// the request's Estimate on l. ComparatorNone has no score (it is a two-level rule, see
// CompareNone) and scores 0.
func (c Comparator) Score(l *Load, est Estimate, inputTokens uint64) float64 {
	switch c {
	case ComparatorTTFT:
		return float64(est.Comparator)
	case ComparatorQueueTime:
		return float64(est.Queue)
	case ComparatorInputWorkSeconds:
		return l.InputWorkSeconds(inputTokens)
	case ComparatorUtilization:
		return l.Utilization()
	case ComparatorNumRequestsQueued:
		return float64(l.QueueSize)
	default:
		return 0
	}
}

// CompareNone is the rule used when no comparator is configured (pulsar-wait-and-widen):
// least effective queue first, then least percent of engine concurrency used (raw running
// counts when either limit is unknown). It returns -1, 0 or +1 like cmp.Compare.
func CompareNone(a *Load, aQueue Millis, b *Load, bQueue Millis) int {
	switch {
	case aQueue < bQueue:
		return -1
	case aQueue > bQueue:
		return 1
	}
	if a.MaxEngineConcurrency == 0 || b.MaxEngineConcurrency == 0 {
		switch {
		case a.RunningRequests < b.RunningRequests:
			return -1
		case a.RunningRequests > b.RunningRequests:
			return 1
		}
		return 0
	}
	// a.run/a.max vs b.run/b.max without division: compare a.run*b.max and b.run*a.max.
	ua, ub := mulSat(a.RunningRequests, b.MaxEngineConcurrency), mulSat(b.RunningRequests, a.MaxEngineConcurrency)
	switch {
	case ua < ub:
		return -1
	case ua > ub:
		return 1
	}
	return 0
}

package load

import "math"

// Reserve returns l with a routing reservation for one request of inputTokens at priority
// applied: one more queued and running request, its tokens added to the queued and total
// input, and — only when the estimate map is non-empty — its prefill time added to the
// entry for its priority (created from the nearest entry at or below it) and to every less
// urgent entry. An invalid throughput with nonzero input clears the map (the estimate
// becomes unknown). All arithmetic saturates. l is not modified: the map is copied.
func (l Load) Reserve(inputTokens uint64, priority uint32) Load {
	l.QueueSize = addSat(l.QueueSize, 1)
	l.QueuedInputTokens = addSat(l.QueuedInputTokens, inputTokens)
	l.RunningRequests = addSat(l.RunningRequests, 1)
	l.TotalInputTokens = addSat(l.TotalInputTokens, inputTokens)
	if len(l.QueueEstimates) == 0 {
		return l
	}
	addMs, ok := ceilWorkMs(inputTokens, l.InputTPS)
	if !ok {
		l.QueueEstimates = nil
		return l
	}
	l.QueueEstimates = reservePriority(l.QueueEstimates, priority, addMs)
	return l
}

// reservePriority returns a copy of m (sorted by priority) with an entry for priority and
// addMs added to it and to every entry of a larger priority number.
func reservePriority(m []PriorityEstimate, priority uint32, addMs uint64) []PriorityEstimate {
	out := make([]PriorityEstimate, 0, len(m)+1)
	var base uint64
	inserted := false
	for _, e := range m {
		if !inserted && e.Priority > priority {
			out = append(out, PriorityEstimate{Priority: priority, QueueMs: addSat(base, addMs)})
			inserted = true
		}
		if e.Priority == priority {
			inserted = true
		}
		if e.Priority <= priority {
			base = e.QueueMs
		}
		if e.Priority >= priority {
			e.QueueMs = addSat(e.QueueMs, addMs)
		}
		out = append(out, e)
	}
	if !inserted {
		out = append(out, PriorityEstimate{Priority: priority, QueueMs: addSat(base, addMs)})
	}
	return out
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

func mulSat(a, b uint64) uint64 {
	if a == 0 || b == 0 {
		return 0
	}
	if p := a * b; p/b == a {
		return p
	}
	return math.MaxUint64
}

package lb

import (
	"slices"
	"time"

	"github.com/switchyard/switchyard/engines/load"
)

// Backend is one registered backend's view as aggregation needs it.
type Backend struct {
	ID     string
	RTT    time.Duration
	Load   load.Load
	Active bool // status ACTIVE with an RTT measurement
}

// Aggregate builds the candidate of cluster clusterID from its backends, as the reference
// router does. Backend-local load is summed over active backends (output TPS, queue size,
// queued input, input-processing and output-generation counts, valid input TPS, the union
// of capabilities and sources); cluster-scoped fields are copied from backends[source]
// (latest wins: max output TPS, KV figures, running count, engine concurrency, total input,
// the priority map); the observation time is the latest; RTT is the mean, floored to whole
// nanoseconds. The peak input throughput (MaxInputTPS) is the greatest active backend's,
// and 0 unless every active backend has a valid one. A request's own prefill rate
// (RequestInputTPS) is the mean valid input throughput when several backends have one:
// one backend prefills the request. ok is false when no backend is active. If backends[source] is not active, the
// first active backend is the source.
func Aggregate(clusterID string, backends []Backend, source int) (c Candidate, ok bool) {
	if source < 0 || source >= len(backends) || !backends[source].Active {
		source = slices.IndexFunc(backends, func(b Backend) bool { return b.Active })
		if source < 0 {
			return Candidate{}, false
		}
	}
	src := &backends[source].Load
	agg := load.Load{
		MaxOutputTPS:         src.MaxOutputTPS,
		KVCapacityTokens:     src.KVCapacityTokens,
		KVUsedTokens:         src.KVUsedTokens,
		KVFreeTokens:         src.KVFreeTokens,
		RunningRequests:      src.RunningRequests,
		MaxEngineConcurrency: src.MaxEngineConcurrency,
		TotalInputTokens:     src.TotalInputTokens,
		QueueEstimates:       src.QueueEstimates,
	}
	var rtt time.Duration
	n, valid, peaks := 0, 0, true
	for i := range backends {
		b := &backends[i]
		if !b.Active {
			continue
		}
		n++
		rtt += b.RTT
		l := &b.Load
		agg.OutputTPS += l.OutputTPS
		agg.QueueSize += l.QueueSize
		agg.QueuedInputTokens += l.QueuedInputTokens
		agg.InputProcessingRequests += l.InputProcessingRequests
		agg.OutputGenerationRequests += l.OutputGenerationRequests
		if load.ValidTPS(l.InputTPS) {
			agg.InputTPS += l.InputTPS
			valid++
		}
		if load.ValidTPS(l.MaxInputTPS) {
			agg.MaxInputTPS = max(agg.MaxInputTPS, l.MaxInputTPS)
		} else {
			peaks = false
		}
		agg.ObservedAtUnixMilli = max(agg.ObservedAtUnixMilli, l.ObservedAtUnixMilli)
		agg.Capabilities = union(agg.Capabilities, l.Capabilities)
		agg.Sources = union(agg.Sources, l.Sources)
	}
	if valid > 1 {
		agg.RequestInputTPS = agg.InputTPS / float64(valid)
	}
	if !peaks {
		agg.MaxInputTPS = 0 // a cluster's peak counts only when every active backend has one
	}
	return Candidate{ClusterID: clusterID, RTT: rtt / time.Duration(n), Load: agg, Backends: n}, true
}

// union returns the sorted union of a and b (a is reused when possible). A sorted b
// without repeats joins an empty a as it is, clipped, so that a later insert copies it
// rather than writing into the backend's view: the common one-backend cluster aggregates
// without allocating (its load report refreshes the candidate on every response).
func union(a, b []string) []string {
	if len(a) == 0 && strictlySorted(b) {
		if len(b) == 0 {
			return a
		}
		return slices.Clip(b)
	}
	for _, s := range b {
		if i, found := slices.BinarySearch(a, s); !found {
			a = slices.Insert(a, i, s)
		}
	}
	return a
}

// strictlySorted reports whether s is in increasing order without repeats.
func strictlySorted(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

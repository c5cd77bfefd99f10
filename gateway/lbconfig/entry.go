package lbconfig

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/switchyard/switchyard/engines/load"
)

// Defaults and bounds of the algorithm settings.
const (
	DefaultSampleCount        = 2                     // power-of-n sample_count
	MinSampleCount            = 1                     // smallest power-of-n sample_count
	MaxSampleCount            = 64                    // largest power-of-n sample_count
	DefaultVirtualNodes       = 150                   // cache_affinity_virtual_nodes
	MaxVirtualNodes           = 1 << 16               // largest cache_affinity_virtual_nodes (our bound; rings are built per request target)
	DefaultAffinityInputScale = 1.0                   // cache_affinity_input_tokens_scale
	DefaultBucketSize         = 20 * time.Millisecond // ttft_bucket_size_ms
	DefaultUnlockFactor       = 0.25                  // next_bucket_unlock_factor
	DefaultN                  = 2                     // n, the wait-and-widen sample size
	DefaultTieTolerance       = 20 * time.Millisecond // tie_tolerance_ms of power-of-n: one TTFT bucket, as wait-and-widen
	DefaultWAWTieTolerance    = 20 * time.Millisecond // tie_tolerance_ms of wait-and-widen: one TTFT bucket
	DefaultSessionTTL         = 5 * time.Minute       // session_affinity_ttl_ms (wait-and-widen)
	DefaultSessionTableSize   = 65536                 // session_table_size (wait-and-widen)
	DefaultPrefixIndexBlocks  = 16384                 // prefix_index_blocks (wait-and-widen)
	DefaultPrefixIndexTTL     = 10 * time.Minute      // prefix_index_ttl_ms (wait-and-widen)
)

// Entry is one algorithm definition with every setting resolved: defaults applied and
// the reference's normalisations done (virtual nodes and n: 0 → 1). Fields that do not
// belong to Algorithm are zero.
type Entry struct {
	// Algorithm selects the balancer.
	Algorithm Algorithm
	// Name is the algorithm name as written in the configuration (aliases preserved), or,
	// for an entry made up from an x-routing-method header under the permissive default,
	// the header's normalised spelling. It is for logs and does not take part in
	// SameSettings.
	Name string

	// RequireCacheAffinityKey makes requests without a non-blank x-cache-affinity-key fail
	// with 400 (require_cache_affinity_key, every algorithm).
	RequireCacheAffinityKey bool
	// RequireInputTokens is declarative (require_input_tokens, every algorithm); the
	// gateway requires x-input-tokens anyway.
	RequireInputTokens bool
	// MaxInputWorkSeconds is the input-work admission limit L in seconds
	// (max_input_work_seconds, every algorithm); meaningful only when HasMaxInputWork.
	MaxInputWorkSeconds float64
	// HasMaxInputWork says whether max_input_work_seconds was set.
	HasMaxInputWork bool

	// SampleCount is power-of-n's sample_count: 1..=64, default 2.
	SampleCount int
	// Comparator ranks candidates: default ComparatorTTFT for power-of-n and
	// wait-and-widen, ComparatorNone for the other algorithms (which take none).
	Comparator load.Comparator
	// TieTolerance is tie_tolerance_ms (power-of-n and wait-and-widen, ttft comparator):
	// candidates whose TTFT estimates are within it of the best are tied, and ties are
	// broken at random. TTFT estimates are only as exact as the RTT probes and the measured
	// throughput behind them (a few milliseconds), so idle backends whose estimates differ
	// by less share the traffic instead of the seemingly nearest taking all of it — a
	// restarted backend, whose first throughput samples are cold, included. Default 5 ms
	// for power-of-n; 1 ms for wait-and-widen, whose buckets already group estimates and
	// whose comparator must still prefer a queue a few milliseconds shorter inside an
	// unlocked bucket. 0 = only exact ties.
	TieTolerance time.Duration

	// Seed is part of the affinity and rendezvous hashes (wait-and-widen, pulsar,
	// pulsar-wait-and-widen); default empty.
	Seed string
	// VirtualNodes is cache_affinity_virtual_nodes: ring points per cluster, default 150,
	// a configured 0 becomes 1.
	VirtualNodes int
	// SelectionCount is cache_affinity_backend_selection_count, the affinity group size;
	// 0 (or unset) disables affinity.
	SelectionCount int
	// AffinityWait is cache_affinity_wait_ms, the affinity hold X; default 0.
	AffinityWait time.Duration
	// AffinityInputScale is cache_affinity_input_tokens_scale, the prefill discount inside
	// the affinity group: default 1.0, finite and within [0, 1].
	AffinityInputScale float64
	// HasQueueSLO is true only when both max_queue_time_floor_ms and
	// max_queue_time_ceil_ms are set.
	HasQueueSLO bool
	// QueueFloor is max_queue_time_floor_ms (not reordered against QueueCeil).
	QueueFloor time.Duration
	// QueueCeil is max_queue_time_ceil_ms.
	QueueCeil time.Duration
	// BucketSize is ttft_bucket_size_ms, default 20 ms.
	BucketSize time.Duration
	// UnlockFactor is next_bucket_unlock_factor, default 0.25; any finite value.
	UnlockFactor float64
	// N is wait-and-widen's sample size n: default 2, a configured 0 becomes 1.
	N int
	// SessionTTL is session_affinity_ttl_ms (wait-and-widen with an affinity group): how
	// long the gateway remembers which cluster last served an affinity key. While it
	// remembers, the key's requests go back to that cluster whenever it is among the
	// group's members that can take them, and only that member's prefill is discounted
	// (the others would prefill the session's prefix in full). Default 5 minutes; 0 turns
	// the session memory off.
	SessionTTL time.Duration
	// SessionTableSize is session_table_size: the most affinity keys remembered per routing
	// target (least recently used forgotten first). Default 65 536.
	SessionTableSize int
	// PrefixAffinity is prefix_affinity (wait-and-widen): a request without an
	// x-cache-affinity-key is routed by its prompt's content. The gateway hashes the
	// prompt's leading content in blocks and remembers, per routing target and cluster,
	// which blocks it recently sent there; each candidate's prefill is discounted by the
	// tokens it is expected to hold, so cache and load are weighed in one TTFT estimate.
	// Default off.
	PrefixAffinity bool
	// PrefixIndexBlocks is prefix_index_blocks: the most prompt blocks remembered per
	// cluster of a routing target (fewer when the cluster reports a smaller KV cache).
	// Default 16 384.
	PrefixIndexBlocks int
	// PrefixIndexTTL is prefix_index_ttl_ms: a remembered block older than this no longer
	// counts as cached. Default 10 minutes; 0 keeps blocks until they are evicted.
	PrefixIndexTTL time.Duration
	// CapacityWait is capacity_wait_ms (wait-and-widen and pulsar-wait-and-widen): how long
	// a request without x-max-wait-ms may wait for a free slot when every eligible backend
	// is full, instead of failing at once with 503 overloaded_error. Parked requests take
	// slots as they free up, so an overloaded fleet stays busy and only requests that could
	// not start within this time are shed (503 with Retry-After). Default 0: fail at once,
	// as the reference router does.
	CapacityWait time.Duration
	// ShortestFirst is capacity_wait_order "shortest" (wait-and-widen and
	// pulsar-wait-and-widen): when a slot frees, the parked request with the least work
	// (input tokens plus its max_tokens bound) takes it first, instead of the earliest
	// arrival ("arrival", the default). Under overload this completes more requests per
	// second; the requests that wait past capacity_wait_ms and are shed are then the
	// longest ones. A request that names no output bound counts as longer than every one
	// that does.
	ShortestFirst bool
	// PrefillWait is prefill_wait (wait-and-widen, pulsar and pulsar-wait-and-widen): a
	// request whose affinity key's previous request is still being prefilled on the
	// cluster it is routed to waits until that prompt is cached there (the earlier
	// request's response headers), at most that request's full-prefill estimate, instead
	// of prefilling the same prompt a second time. Default on.
	PrefillWait bool
	// LastClusterAffinity is last_cluster_affinity (wait-and-widen and
	// pulsar-wait-and-widen): the client names the cluster that served its session's
	// previous turn in x-stargate-last-cluster-id, and the request returns there (the
	// cluster is promoted to the front of its affinity group). Default off.
	LastClusterAffinity bool
	// MaxQueued is the number of requests a backend may run beyond its engine
	// concurrency and still count as having capacity (max_queued, default 0).
	MaxQueued uint64
	// IgnoreQueueTime drops the queue term from bucket TTFTs (ignore_queue_time).
	IgnoreQueueTime bool
	// IgnoreInputProcessingTime drops the prefill term from bucket TTFTs
	// (ignore_input_processing_time).
	IgnoreInputProcessingTime bool

	// BandWiden is band_widen_interval_ms (pulsar-wait-and-widen): after the affinity hold
	// the open set of the pulsar ranking grows by one band per interval — ranks 1..k+2 at
	// the hold, 1..k+6 one interval later, 1..k+14 after two, … (k the affinity group
	// size); 0 opens every ranked cluster at the hold. Meaningful only when HasBandWiden;
	// unset, it is the hold.
	BandWiden time.Duration
	// HasBandWiden says whether band_widen_interval_ms was set.
	HasBandWiden bool
	// FallbackMaxQueued is fallback_max_queued (pulsar-wait-and-widen): max_queued for the
	// clusters opened after the hold; default 0 (overflow only to clusters with a free
	// slot, an unknown engine concurrency counting as free).
	FallbackMaxQueued uint64
	// RendezvousWeight is rendezvous_weight (pulsar and pulsar-wait-and-widen): the
	// cluster weight of the rendezvous ranking.
	RendezvousWeight RendezvousWeight

	// ConsiderKVFreeTokens skips clusters without enough free KV tokens (pulsar and
	// pulsar-wait-and-widen only; consider_kv_free_tokens).
	ConsiderKVFreeTokens bool

	// FromExpression says the entry was made by a routing expression (an x-routing-method
	// value with parameters) rather than found in the configuration: the scheduler keeps
	// only a target's most recent expression balancers.
	FromExpression bool

	// TTFTCorrection is ttft_correction (power-of-n, wait-and-widen and
	// pulsar-wait-and-widen, the algorithms that estimate TTFT): each cluster's TTFT
	// estimates are multiplied by the ratio of observed to estimated times to first byte
	// the gateway learned for that cluster and routing target (docs/routing.md). The
	// gateway learns the ratio whatever this setting; off, the estimates are the load
	// reports' alone. Default on (DefaultEntry); an Entry built in code without
	// DefaultEntry has it off.
	TTFTCorrection bool
}

// DefaultEntry returns the definition of a with default settings and its canonical name.
func DefaultEntry(a Algorithm) Entry {
	e := Entry{Algorithm: a, Name: a.String()}
	e.TTFTCorrection = a.estimatesTTFT()
	switch a {
	case PowerOfN:
		e.SampleCount = DefaultSampleCount
		e.Comparator = load.ComparatorTTFT
		e.TieTolerance = DefaultTieTolerance
	case WaitAndWiden, PulsarWaitAndWiden:
		if a == WaitAndWiden {
			e.Comparator = load.ComparatorTTFT
			e.TieTolerance = DefaultWAWTieTolerance
			e.SessionTTL = DefaultSessionTTL
			e.SessionTableSize = DefaultSessionTableSize
			e.PrefixIndexBlocks = DefaultPrefixIndexBlocks
			e.PrefixIndexTTL = DefaultPrefixIndexTTL
		}
		e.VirtualNodes = DefaultVirtualNodes
		e.AffinityInputScale = DefaultAffinityInputScale
		e.BucketSize = DefaultBucketSize
		e.UnlockFactor = DefaultUnlockFactor
		e.N = DefaultN
	default: // round-robin, random and pulsar have no algorithm-specific numbers
	}
	e.PrefillWait = a.routesByKey()
	return e
}

// routesByKey reports whether the algorithm sends an affinity key's requests to the same
// cluster (and so takes prefill_wait).
func (a Algorithm) routesByKey() bool {
	return a == WaitAndWiden || a == Pulsar || a == PulsarWaitAndWiden
}

// SameSettings reports whether e and o define the same balancer: every field but Name is
// equal. Entries with equal settings may share balancer state.
func (e Entry) SameSettings(o Entry) bool {
	o.Name = e.Name
	return e == o
}

// hasWAWSettings reports whether the algorithm takes the wait-and-widen settings.
func (a Algorithm) hasWAWSettings() bool { return a == WaitAndWiden || a == PulsarWaitAndWiden }

// takesComparator reports whether the algorithm has a configurable comparator.
func (a Algorithm) takesComparator() bool { return a == PowerOfN || a == WaitAndWiden }

// estimatesTTFT reports whether the algorithm ranks candidates by TTFT estimates (and so
// takes ttft_correction).
func (a Algorithm) estimatesTTFT() bool {
	return a == PowerOfN || a == WaitAndWiden || a == PulsarWaitAndWiden
}

// takesSeed reports whether the algorithm hashes with a seed.
func (a Algorithm) takesSeed() bool {
	return a == WaitAndWiden || a == Pulsar || a == PulsarWaitAndWiden
}

// isPulsar reports whether the algorithm uses the Pulsar ranking.
func (a Algorithm) isPulsar() bool { return a == Pulsar || a == PulsarWaitAndWiden }

// Validate checks the settings that belong to e.Algorithm and returns errors.Join of one
// message per bad field (nil when e is usable). Settings of other algorithms are not
// inspected, except that a comparator, a seed or consider_kv_free_tokens on an algorithm
// that does not take one is refused. It never panics.
func (e Entry) Validate() error {
	return errors.Join(e.problems()...)
}

// problems returns one error per bad field.
func (e Entry) problems() []error {
	if !e.Algorithm.valid() {
		return []error{fmt.Errorf("unknown algorithm %s", e.Algorithm)}
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if e.HasMaxInputWork && math.IsNaN(e.MaxInputWorkSeconds) {
		add("max_input_work_seconds must be a number, not NaN")
	}
	switch {
	case e.Algorithm == PulsarWaitAndWiden && e.Comparator != load.ComparatorNone:
		add("comparator is not supported for pulsar-wait-and-widen")
	case !e.Algorithm.takesComparator() && e.Comparator != load.ComparatorNone:
		add("comparator is not supported for %s", e.Algorithm)
	case e.Algorithm.takesComparator() && (e.Comparator == load.ComparatorNone || e.Comparator > load.ComparatorNumRequestsQueued):
		add("%s comparator must be one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued (got %s)", e.Algorithm, e.Comparator)
	}
	if !e.Algorithm.takesSeed() && e.Seed != "" {
		add("seed is not supported for %s", e.Algorithm)
	}
	if !e.Algorithm.isPulsar() && e.RendezvousWeight != WeightDefault {
		add("rendezvous_weight is not supported for %s", e.Algorithm)
	}
	if e.RendezvousWeight > WeightLastMeanInputTPS {
		add("rendezvous_weight must be max-input-tps or last-mean-input-tps")
	}
	if !e.Algorithm.isPulsar() && e.ConsiderKVFreeTokens {
		add("consider_kv_free_tokens is not supported for %s", e.Algorithm)
	}
	if !e.Algorithm.estimatesTTFT() && e.TTFTCorrection {
		add("ttft_correction is not supported for %s, which does not estimate TTFT", e.Algorithm)
	}
	if e.Algorithm == PowerOfN && (e.SampleCount < MinSampleCount || e.SampleCount > MaxSampleCount) {
		add("power-of-n sample_count must be between %d and %d", MinSampleCount, MaxSampleCount)
	}
	if e.Algorithm.hasWAWSettings() {
		errs = append(errs, e.validateWAW()...)
	}
	return errs
}

// validateWAW checks the wait-and-widen settings (shared by pulsar-wait-and-widen).
func (e Entry) validateWAW() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if e.Algorithm == WaitAndWiden && (e.VirtualNodes < 1 || e.VirtualNodes > MaxVirtualNodes) {
		add("cache_affinity_virtual_nodes must be between 1 and %d", MaxVirtualNodes)
	}
	if e.SelectionCount < 0 {
		add("cache_affinity_backend_selection_count must not be negative")
	}
	if e.AffinityWait < 0 {
		add("cache_affinity_wait_ms must not be negative")
	}
	if !(e.AffinityInputScale >= 0 && e.AffinityInputScale <= 1) { // also false for NaN
		add("cache_affinity_input_tokens_scale must be between 0.0 and 1.0")
	}
	if e.Algorithm != PulsarWaitAndWiden && (e.HasBandWiden || e.FallbackMaxQueued != 0) {
		add("band_widen_interval_ms and fallback_max_queued are only supported for pulsar-wait-and-widen")
	}
	if e.HasBandWiden && e.BandWiden < 0 {
		add("band_widen_interval_ms must not be negative")
	}
	if e.HasQueueSLO && e.QueueFloor < 0 {
		add("max_queue_time_floor_ms must not be negative")
	}
	if e.HasQueueSLO && e.QueueCeil < 0 {
		add("max_queue_time_ceil_ms must not be negative")
	}
	if e.BucketSize < 0 {
		add("ttft_bucket_size_ms must not be negative")
	}
	if math.IsNaN(e.UnlockFactor) || math.IsInf(e.UnlockFactor, 0) {
		add("next_bucket_unlock_factor must be a finite number")
	}
	if e.N < 1 {
		add("n must be at least 1")
	}
	return errs
}

package lb

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/engines/load"
)

// Candidate is one routable cluster of a routing target: its aggregated load and the mean
// round trip of its backends.
type Candidate struct {
	ClusterID string
	RTT       time.Duration
	Load      load.Load
	// Backends is the number of active backends aggregated into this candidate.
	Backends int
	// Correction multiplies the candidate's TTFT estimates (TTFT and Comparator; not their
	// Queue and Prefill terms): the ratio of observed to estimated times to first byte the
	// gateway learned for this cluster. 0 (the zero value) and 1 correct nothing.
	Correction float64
	// CachedCorrection replaces Correction for estimates whose prefill is discounted
	// (scale < 1: a prefix the balancer expects cached there), learned from those
	// estimates alone: a cached request's error (the engine's fixed cost of a request,
	// which the load reports do not carry) is not a full prefill's. 0 = none learned:
	// Correction applies.
	CachedCorrection float64
}

// Estimate is c's TTFT estimate for r with its prefill scaled by scale, corrected by
// c.Correction (c.CachedCorrection for a discounted prefill): the one place every
// estimating balancer gets a candidate's estimate from.
//
// When r's session has its previous turn's prompt still being prefilled on c
// (Request.Prefilling) and scale prices part of r's input as cached there, r is estimated
// behind that turn: r cannot start sooner than the prompt it extends is cached, and the
// queue c reports already holds that prompt's whole prefill. With a free slot nothing
// changes (the request goes there and waits for the prompt, see prefill_wait); a full
// engine of known concurrency is priced at the turn's remaining prefill
// (Request.PrefillLeft; see behind); without a known concurrency, at the longer of that
// and c's queue less the turn's prompt.
func (c *Candidate) Estimate(r *Request, scale float64, ignore load.Ignore) load.Estimate {
	e := c.Load.Estimate(load.MillisOf(c.RTT), r.InputTokens, r.Priority, scale, ignore)
	if scale < 1 && r.Prefilling != "" && r.Prefilling == c.ClusterID {
		e = c.behind(e, r, scale, ignore)
	}
	if f := load.Millis(c.factor(scale)); f > 0 && f != 1 {
		e.TTFT *= f
		e.Comparator *= f
	}
	return e
}

// behind re-derives e's queue for a request behind its session's prompt in flight on c
// (see Estimate).
func (c *Candidate) behind(e load.Estimate, r *Request, scale float64, ignore load.Ignore) load.Estimate {
	left := load.MillisOf(r.PrefillLeft)
	q := e.Queue
	// The prompt in flight's share of the reported queue: queued work drains at the
	// cluster's summed rate, not at one request's (Load.RequestInputTPS).
	switch inFlight := load.WorkTime((1-scale)*float64(r.InputTokens), c.Load.InputTPS); {
	case c.Load.HasFreeSlot():
		// Room for the turn: it is sent there and waits for its prompt (prefill_wait),
		// priced like any turn of a session on the cluster that holds it — the wait
		// for its own prompt is not a reason to copy that prompt elsewhere.
	case c.Load.MaxEngineConcurrency > 0:
		// Full: the turn in flight holds one of the engine's slots, which it frees
		// when it ends, so the request waits for that turn (its decode, which no
		// estimate prices, aside) whatever else the queue holds — a serial sum of every
		// prompt in flight, which overstates an engine that prefills its slots side by
		// side.
		q = left
	case q.IsFinite() && inFlight.IsFinite():
		q = max(q-inFlight, left, 0)
	default:
		q = max(q, left)
	}
	e.Queue = q
	e.Comparator = load.MillisOf(c.RTT) + q + e.Prefill
	e.TTFT = load.MillisOf(c.RTT)
	if !ignore.Queue {
		e.TTFT += q
	}
	if !ignore.Prefill {
		e.TTFT += e.Prefill
	}
	return e
}

// factor is the correction of an estimate at prefill scale.
func (c *Candidate) factor(scale float64) float64 {
	if scale < 1 && c.CachedCorrection > 0 {
		return c.CachedCorrection
	}
	return c.Correction
}

// EstimateFactor is the correction Estimate applies at prefill scale (0: none).
func (c *Candidate) EstimateFactor(scale float64) float64 { return c.factor(scale) }

// Snapshot is the candidate set of one routing target (routing key × model) at one moment,
// reservations included. Candidates are in stable cluster-id order; build it with
// NewSnapshot (or Reset) and change a candidate afterwards only in place, calling Changed
// for it (balancers cache derived data per membership and index the candidates).
type Snapshot struct {
	RoutingKey string
	Model      string
	Candidates []Candidate
	membership uint64
	// gen identifies this content of the snapshot: unique across every Reset of every
	// snapshot of the process. A balancer's index of the candidates is valid for one gen
	// and follows changes, the candidates patched in place since (Changed).
	gen     uint64
	changes []int32
}

// snapshotGen numbers the snapshots' contents (Snapshot.gen).
var snapshotGen atomic.Uint64

// Changed records that the owner patched candidate i in place (its load, RTT or
// corrections): the balancers that index the candidates update that one before their next
// decision instead of indexing the whole snapshot again. An owner that patches a
// candidate must call it; a snapshot never patched needs nothing.
func (s *Snapshot) Changed(i int) {
	if len(s.changes) >= maxPendingChanges(len(s.Candidates)) {
		// So many changes that indexing again is cheaper than following them: a new gen.
		s.changes = s.changes[:0]
		s.gen = snapshotGen.Add(1)
		return
	}
	s.changes = append(s.changes, int32(i)) //nolint:gosec // a candidate index, as every balancer keeps them
}

// maxPendingChanges bounds the changes a snapshot keeps between two Resets.
func maxPendingChanges(candidates int) int { return 4*candidates + 64 }

// NewSnapshot builds a snapshot over candidates (kept in the given order, which must be
// stable across snapshots of the same target, e.g. sorted by cluster id).
func NewSnapshot(routingKey, model string, candidates []Candidate) *Snapshot {
	s := &Snapshot{}
	s.Reset(routingKey, model, candidates)
	return s
}

// Reset makes s a snapshot over candidates, in place: an owner that rebuilds its snapshot
// often (the scheduler, after every load report) reuses one Snapshot and one candidate
// slice instead of allocating them. Balancers keep nothing of a snapshot between decisions
// but its membership hash, which Reset recomputes.
func (s *Snapshot) Reset(routingKey, model string, candidates []Candidate) {
	var h xxh3.Hasher
	h.Reset()
	var sep [1]byte
	for i := range candidates {
		_, _ = h.WriteString(candidates[i].ClusterID)
		_, _ = h.Write(sep[:])
	}
	*s = Snapshot{
		RoutingKey: routingKey, Model: model, Candidates: candidates,
		membership: h.Sum64() ^ uint64(len(candidates)),
		gen:        snapshotGen.Add(1), changes: s.changes[:0],
	}
}

// hasCluster reports whether a candidate of s is cluster id.
func (s *Snapshot) hasCluster(id string) bool { return s.index(id) >= 0 }

// index returns the index of cluster id's candidate, or -1 (also for a blank id).
func (s *Snapshot) index(id string) int32 {
	if id == "" {
		return -1
	}
	for i := range s.Candidates {
		if s.Candidates[i].ClusterID == id {
			return int32(i)
		}
	}
	return -1
}

// sameMembership reports whether a cached derivation keyed by (members, key, model) is
// still valid for s.
func (s *Snapshot) sameMembership(members uint64, routingKey, model string) bool {
	return s.membership == members && s.RoutingKey == routingKey && s.Model == model
}

// Request is what a balancer needs to know about one routing attempt. Its strings must not
// alias reusable buffers: caches may retain AffinityKey.
type Request struct {
	// AffinityKey is x-cache-affinity-key; blank means absent.
	AffinityKey string
	InputTokens uint64
	// Priority is x-priority (lower = more urgent).
	Priority uint32
	// SLO is x-request-slo-ms; 0 means none. It only drives queue-limit interpolation.
	SLO time.Duration
	// Excluded lists the cluster ids that already failed for this request.
	Excluded []string
	// At is the time of the decision (the scheduler's clock): the clock of the session
	// memory and the prefix index. Zero leaves both out.
	At time.Time
	// Prefix holds the chained block hashes of the prompt's leading content
	// (AppendPrefixHashes), for prefix-aware routing; nil when not computed.
	Prefix []uint64
	// Session identifies a plain client's conversation (a hash of its prompt's opening,
	// stable from turn to turn); 0 when unknown. Prefix-aware routing places a new prompt
	// by it, identically on every gateway replica.
	Session uint64
	// LastCluster is x-stargate-last-cluster-id: the cluster that served the session's
	// previous turn (last_cluster_affinity); blank means absent.
	LastCluster string
	// Prefilling is the cluster where an earlier turn of the request's session (its
	// affinity key) is still being prefilled, and PrefillLeft how much longer that is
	// expected to take (the scheduler's prefill_wait table); blank: none known. A cluster
	// priced as holding part of the request's prompt is then estimated behind that turn
	// (see Candidate.Estimate).
	Prefilling  string
	PrefillLeft time.Duration
}

// IsExcluded reports whether clusterID already failed for this request.
func (r *Request) IsExcluded(clusterID string) bool {
	for _, e := range r.Excluded {
		if e == clusterID {
			return true
		}
	}
	return false
}

// hasAffinityKey reports whether the request carries a non-blank affinity key.
func (r *Request) hasAffinityKey() bool { return strings.TrimSpace(r.AffinityKey) != "" }

// allExcluded reports whether no candidate of s is left for r.
func allExcluded(s *Snapshot, r *Request) bool {
	if len(r.Excluded) == 0 {
		return len(s.Candidates) == 0
	}
	for i := range s.Candidates {
		if !r.IsExcluded(s.Candidates[i].ClusterID) {
			return false
		}
	}
	return true
}

// precheck returns the Unavailable decision for an empty snapshot or a fully excluded
// request, and ok = false; otherwise ok = true.
func precheck(s *Snapshot, r *Request) (Decision, bool) {
	if len(s.Candidates) == 0 {
		return Unavailable(ReasonNoCandidates), false
	}
	if allExcluded(s, r) {
		return Unavailable(ReasonAllExcluded), false
	}
	return Decision{}, true
}

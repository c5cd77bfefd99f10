package lb

import (
	"fmt"
	"time"

	"github.com/switchyard/switchyard/engines/load"
)

// Kind is the outcome class of a routing decision.
type Kind uint8

// The three outcomes of a decision.
const (
	KindUnavailable Kind = iota // nothing will become selectable by waiting
	KindSelected                // a candidate was chosen
	KindWait                    // nothing selectable now; retry after Decision.Wait
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case KindSelected:
		return "selected"
	case KindWait:
		return "wait"
	default:
		return "unavailable"
	}
}

// Reason says why a decision is Unavailable (bounded, usable as a metric label).
type Reason uint8

// Reasons for Unavailable decisions.
const (
	ReasonNone         Reason = iota
	ReasonNoCandidates        // the snapshot is empty
	ReasonAllExcluded         // every candidate failed already for this request
	ReasonNoFiniteTTFT        // no eligible candidate has a finite TTFT estimate
	ReasonNoCapacity          // every eligible candidate is full
	ReasonNotRanked           // pulsar: no candidate has a valid weight or passes the KV check
	ReasonQueueLimit          // every candidate exceeds the queue SLO
)

var reasonNames = [...]string{
	ReasonNone:         "none",
	ReasonNoCandidates: "no_candidates",
	ReasonAllExcluded:  "all_excluded",
	ReasonNoFiniteTTFT: "no_finite_ttft",
	ReasonNoCapacity:   "no_capacity",
	ReasonNotRanked:    "not_ranked",
	ReasonQueueLimit:   "queue_limit",
}

// String returns the reason's snake_case name.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// SessionState is how last_cluster_affinity classified a request's session.
type SessionState uint8

// Session states.
const (
	SessionNone      SessionState = iota // last_cluster_affinity is off
	SessionNew                           // no x-stargate-last-cluster-id
	SessionReturning                     // the named cluster is a current candidate
	SessionStale                         // the named cluster is not a candidate
)

var sessionNames = [...]string{SessionNone: "none", SessionNew: "new", SessionReturning: "returning", SessionStale: "stale"}

// String returns the state's metric label value.
func (s SessionState) String() string {
	if int(s) < len(sessionNames) {
		return sessionNames[s]
	}
	return fmt.Sprintf("session(%d)", uint8(s))
}

// Decision is the three-valued answer of a balancer. Only the fields of its Kind are set.
type Decision struct {
	Kind Kind
	// Index is the selected candidate's index in the snapshot (KindSelected).
	Index int
	// RankDepth is 1 for the primary choice, >1 for a fallback (KindSelected).
	RankDepth int
	// KVSkipped is set when a higher-ranked cluster was skipped for lack of free KV tokens
	// (pulsar variants, KindSelected).
	KVSkipped bool
	// TTFT is the balancer's TTFT estimate of the selected candidate, with whatever prefill
	// discount it applied (KindSelected; 0 when the balancer does not estimate TTFT, e.g.
	// round-robin, random and pulsar). The gateway compares it with the observed time to
	// first byte.
	TTFT load.Millis
	// CachedShare is the share of the request's input tokens the balancer expects the
	// selected candidate to hold in its prompt cache, 1 − the prefill scale it priced the
	// candidate at (KindSelected; 0 when it expects none, or does not price prefill per
	// candidate). The gateway reserves and announces only the rest as prefill work, so the
	// queue a backend shows for a request whose prefix it holds is the suffix's, not the
	// whole prompt's.
	CachedShare float64
	// Session classifies the request's session under last_cluster_affinity (KindSelected;
	// SessionNone when the option is off).
	Session SessionState
	// Wait is how long until something may become selectable (KindWait, always > 0).
	Wait time.Duration
	// Reason says why nothing can be chosen (KindUnavailable).
	Reason Reason
}

// Selected is a decision for candidate index at rank depth rank.
func Selected(index, rank int) Decision {
	return Decision{Kind: KindSelected, Index: index, RankDepth: rank}
}

// Wait is a decision to retry after d.
func Wait(d time.Duration) Decision { return Decision{Kind: KindWait, Wait: d} }

// Unavailable is a decision that nothing can be chosen, for reason r.
func Unavailable(r Reason) Decision { return Decision{Kind: KindUnavailable, Reason: r} }

// String renders the decision for logs and test failures.
func (d Decision) String() string {
	switch d.Kind {
	case KindSelected:
		return fmt.Sprintf("Selected{index: %d, rank: %d, kv_skipped: %t}", d.Index, d.RankDepth, d.KVSkipped)
	case KindWait:
		return fmt.Sprintf("Wait{%v}", d.Wait)
	default:
		return fmt.Sprintf("Unavailable{%v}", d.Reason)
	}
}

package dispatch

import (
	"slices"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
)

// Waiting for a prompt in flight (lb-config prefill_wait). An engine caches a prompt only
// once it has prefilled it, so a session's next turn that reaches the same cluster while
// the previous turn is still being prefilled pays the whole prefill again: for a long
// prompt that is most of a second, for nothing. The scheduler therefore remembers, per
// affinity key, the grant whose prompt is being prefilled and on which cluster; a request
// of that key routed to that cluster waits until the attempt's response headers arrive
// (the engine answers them once the prompt is cached: the handler sends PrefillDone), at
// most twice the earlier grant's full TTFT estimate plus prefillSlack: a prefill that
// overruns its estimate that much is stuck or failing, and starting anew is no slower.

// prefillState is one affinity key's grant whose prompt is being prefilled.
type prefillState struct {
	cluster string
	token   uint64    // the grant's Outcome.PrefillToken
	ready   time.Time // when its prompt is expected cached (grant + its TTFT estimate)
	cached  bool      // its response headers came (PrefillDone): nobody waits for it any more
	until   time.Time
}

// maxTrackedPrefills bounds the scheduler's table of prompts in flight; beyond it new
// grants are not tracked (their followers do not wait).
const maxTrackedPrefills = 65536

// prefillSlack is added to the wait bound so that a short estimate's noise does not cut it.
const prefillSlack = 250 * time.Millisecond

// maxPrefillWait bounds how long a request waits for a prompt in flight.
const maxPrefillWait = 30 * time.Second

// PrefillDone tells the scheduler that the attempt granted with Token (Outcome.PrefillToken)
// for affinity key Key has its response headers, or ended without them: either way, the
// requests waiting for its prompt need not wait any longer.
type PrefillDone struct {
	Key   string
	Token uint64
}

// IgnoreDeadLetterLogging implements actor.IgnoreDeadLetterLogging (see Route).
func (PrefillDone) IgnoreDeadLetterLogging() {}

// promptInFlight returns p's key's prompt in flight (prefill_wait): granted, not yet
// cached and within its wait bound.
func (s *Scheduler) promptInFlight(p *Pending, now time.Time) (prefillState, bool) {
	key := p.SessionKey()
	if !p.Entry.PrefillWait || key == "" {
		return prefillState{}, false
	}
	st, ok := s.prefills[key]
	if !ok || st.cached || !now.Before(st.until) {
		return prefillState{}, false
	}
	return st, true
}

// waitsForPrefill reports whether p, routed to cluster, should wait for its key's prompt in
// flight there; it parks p when so.
func (s *Scheduler) waitsForPrefill(p *Pending, cluster string, d lb.Decision, now time.Time) bool {
	st, ok := s.promptInFlight(p, now)
	if !ok || st.cluster != cluster {
		return false
	}
	if !s.parkForPrompt(p, st.until, now) {
		return false
	}
	p.behind, p.behindTarget = d, cluster
	return true
}

// parkForPrompt parks p until a prompt's wait bound, or p's x-max-wait-ms deadline when
// that comes first; it reports false, leaving p unparked, when that deadline has passed.
func (s *Scheduler) parkForPrompt(p *Pending, until, now time.Time) bool {
	wake := until
	if p.HasMaxWait {
		deadline := p.Arrival.Add(p.MaxWait)
		if !now.Before(deadline) {
			return false
		}
		wake = minTime(wake, deadline)
	}
	s.park(p, wake)
	return true
}

// grantBehind grants p to the cluster it waited on for its prompt in flight, now that the
// prompt is cached there (or its wait ran out), when that cluster is still a candidate that
// can take it: the decision that chose it still holds, and deciding anew would weigh the
// cluster's queue, which still counts the prompt's whole prefill until its next report,
// against a prefill from scratch elsewhere.
// While the prompt is still in flight (a wake for another reason) p waits on.
func (s *Scheduler) grantBehind(p *Pending, snap *lb.Snapshot, elapsed time.Duration, maxQueued uint64, now time.Time) bool {
	cluster := p.behindTarget
	if cluster == "" {
		return false
	}
	d := p.behind
	p.behind, p.behindTarget = lb.Decision{}, ""
	if s.waitsForPrefill(p, cluster, d, now) {
		return true
	}
	i := slices.IndexFunc(snap.Candidates, func(c lb.Candidate) bool { return c.ClusterID == cluster })
	// A full cluster: the balancer decides anew, its clock counted from the moment the
	// prompt was cached (behindPrefill).
	if i < 0 || p.Req.IsExcluded(cluster) || !snap.Candidates[i].Load.HasCapacity(maxQueued) {
		return false
	}
	id, ok := s.pickBackend(cluster, p)
	if !ok {
		return false
	}
	// The estimate that chose it waited for the prompt; what is left is the rest.
	s.behindPrefill(p, now)
	d.Index = i
	d.TTFT = snap.Candidates[i].Estimate(&p.Req, 1-d.CachedShare, load.Ignore{}).Comparator
	s.grant(p, id, &snap.Candidates[i], d, elapsed)
	return true
}

// duplicateShare: a cluster expected to hold less than this share of a request's prompt
// would prefill most of it again (staysWithPrompt).
const duplicateShare = 0.5

// staysWithPrompt keeps p from leaving the cluster that is prefilling its key's prompt.
// When the balancer chose (decision d) a cluster that would prefill most of the prompt
// again, beside the prefill under way — even one that would be done sooner, because the
// session's cluster is full — while the prompt is in flight on a cluster that is a current
// candidate p may use, p is parked until the prompt is cached there (or the entry's wait
// bound, or p's x-max-wait-ms, runs out) and then routed again, the balancer's clock
// counting from the moment the prompt was cached (behindPrefill). A turn that finds the
// session's cluster with a free slot already waits for the prompt there (waitsForPrefill);
// this makes a full cluster no different. It reports whether p was parked.
func (s *Scheduler) staysWithPrompt(p *Pending, snap *lb.Snapshot, d lb.Decision, now time.Time) bool {
	if d.CachedShare >= duplicateShare {
		return false
	}
	st, ok := s.promptInFlight(p, now)
	if !ok || st.cluster == snap.Candidates[d.Index].ClusterID || p.Req.IsExcluded(st.cluster) {
		return false
	}
	if !slices.ContainsFunc(snap.Candidates, func(c lb.Candidate) bool { return c.ClusterID == st.cluster }) {
		return false
	}
	return s.parkForPrompt(p, st.until, now)
}

// behindPrefill tells the balancer where p's key has a prompt in flight and how long it
// is still expected to take (lb.Request.Prefilling), so that the cluster is priced behind
// it rather than with its whole prefill counted in the cluster's queue; once the prompt
// is cached, until the entry's bound, with nothing left to wait for: the earlier turn
// holds one of the cluster's slots while it decodes and frees it when it ends.
func (s *Scheduler) behindPrefill(p *Pending, now time.Time) {
	p.Req.Prefilling, p.Req.PrefillLeft = "", 0
	key := p.SessionKey()
	if !p.Entry.PrefillWait || key == "" {
		return
	}
	if st, ok := s.prefills[key]; ok && now.Before(st.until) {
		p.Req.Prefilling, p.Req.PrefillLeft = st.cluster, max(st.ready.Sub(now), 0)
		if st.cached {
			p.Req.PrefillLeft = 0
		}
		// Until the prompt is cached, p waits for a cache that is on its way: the
		// balancer's hold and the pace at which clusters lacking the prompt unlock count
		// from the moment it is (expected) cached, not from p's arrival (decisionElapsed).
		if at := minTime(now, st.ready); at.After(p.decideFrom) {
			p.decideFrom = at
		}
	}
}

// trackPrefill records p's grant on cand as its key's prompt in flight and marks out so
// that the handler reports its headers (PrefillDone). The prompt is expected cached after
// the grant's estimate at the share of the prompt the decision expected cached there (a
// later turn of a session prefills only its new suffix); the wait for it is bounded by
// the estimate of prefilling all of it.
func (s *Scheduler) trackPrefill(p *Pending, cand *lb.Candidate, cachedShare float64, out *Outcome, now time.Time) {
	key := p.SessionKey()
	if !p.Entry.PrefillWait || key == "" {
		return
	}
	if _, ok := s.prefills[key]; !ok && len(s.prefills) >= maxTrackedPrefills {
		for k, st := range s.prefills {
			if !now.Before(st.until) {
				delete(s.prefills, k)
			}
		}
		if len(s.prefills) >= maxTrackedPrefills {
			return
		}
	}
	full := cand.Estimate(&p.Req, 1, load.Ignore{}).TTFT
	if !full.IsFinite() || full < 0 {
		return
	}
	ready := full
	if cachedShare > 0 {
		if e := cand.Estimate(&p.Req, 1-min(cachedShare, 1), load.Ignore{}).TTFT; e.IsFinite() && e >= 0 && e < full {
			ready = e
		}
	}
	s.prefillToken++
	out.PrefillToken = s.prefillToken
	s.prefills[key] = prefillState{cluster: cand.ClusterID, token: s.prefillToken, ready: now.Add(ready.Duration()), until: now.Add(min(2*full.Duration()+prefillSlack, maxPrefillWait))}
}

// prefillDone forgets a prompt in flight once its attempt has its headers; it reports
// whether requests may be waiting for it.
func (s *Scheduler) prefillDone(m PrefillDone) bool {
	st, ok := s.prefills[m.Key]
	if !ok || st.token != m.Token || st.cached {
		return false
	}
	// Kept, as cached, until its bound: the turn still holds its slot there while it
	// decodes, so a next turn of the session is priced at that cluster without waiting
	// for anything but a slot (see behindPrefill).
	st.cached = true
	st.ready = s.deps.Now() // when it was cached in fact
	s.prefills[m.Key] = st
	return true
}

package dispatch

import (
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
	token   uint64 // the grant's Outcome.PrefillToken
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

// waitsForPrefill reports whether p, routed to cluster, should wait for its key's prompt in
// flight there; it parks p when so.
func (s *Scheduler) waitsForPrefill(p *Pending, cluster string, now time.Time) bool {
	if !p.Entry.PrefillWait || p.Req.AffinityKey == "" {
		return false
	}
	st, ok := s.prefills[p.Req.AffinityKey]
	if !ok || st.cluster != cluster || !now.Before(st.until) {
		return false
	}
	wake := st.until
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

// trackPrefill records p's grant on cand as its key's prompt in flight and marks out so
// that the handler reports its headers (PrefillDone).
func (s *Scheduler) trackPrefill(p *Pending, cand *lb.Candidate, out *Outcome, now time.Time) {
	key := p.Req.AffinityKey
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
	s.prefillToken++
	out.PrefillToken = s.prefillToken
	s.prefills[key] = prefillState{cluster: cand.ClusterID, token: s.prefillToken, until: now.Add(min(2*full.Duration()+prefillSlack, maxPrefillWait))}
}

// prefillDone forgets a prompt in flight once its attempt has its headers; it reports
// whether requests may be waiting for it.
func (s *Scheduler) prefillDone(m PrefillDone) bool {
	st, ok := s.prefills[m.Key]
	if !ok || st.token != m.Token {
		return false
	}
	delete(s.prefills, m.Key)
	return true
}

package lb

import (
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Admission is the outcome of input-work admission: the request's input tokens plus the
// queued input of the eligible candidates, over their summed valid input TPS, against the
// algorithm's max_input_work_seconds.
type Admission uint8

// Input-work admission outcomes; the non-admitted ones are metric reasons.
const (
	Admitted                     Admission = iota
	InputWorkLimitExceeded                 // pooled work seconds above the limit
	InputWorkCapacityUnavailable           // work, but no eligible throughput at all
)

// InputWorkSeconds is the pooled input work of r over the eligible candidates of s:
// (request input + Σ queued input) / Σ valid input TPS. Eligible means non-excluded; for
// the pulsar variants also a valid TPS and, with considerKV, the KV check. ok is false when
// there is work but no eligible throughput.
func InputWorkSeconds(s *Snapshot, r *Request, e lbconfig.Entry) (seconds float64, ok bool) {
	pulsarRules := e.Algorithm == lbconfig.Pulsar || e.Algorithm == lbconfig.PulsarWaitAndWiden
	work, tps := float64(r.InputTokens), 0.0
	for i := range s.Candidates {
		c := &s.Candidates[i]
		if r.IsExcluded(c.ClusterID) {
			continue
		}
		valid := load.ValidTPS(c.Load.InputTPS)
		if pulsarRules && (!valid || (e.ConsiderKVFreeTokens && !kvFeasible(&c.Load, r.InputTokens))) {
			continue
		}
		work += float64(c.Load.QueuedInputTokens)
		if valid {
			tps += c.Load.InputTPS
		}
	}
	t := load.WorkTime(work, tps)
	return float64(t) / 1000, t.IsFinite()
}

// Admit applies e's max_input_work_seconds to r on s; without a limit every request is
// admitted.
func Admit(s *Snapshot, r *Request, e lbconfig.Entry) Admission {
	if !e.HasMaxInputWork {
		return Admitted
	}
	seconds, ok := InputWorkSeconds(s, r, e)
	switch {
	case !ok:
		return InputWorkCapacityUnavailable
	case seconds > e.MaxInputWorkSeconds:
		return InputWorkLimitExceeded
	default:
		return Admitted
	}
}

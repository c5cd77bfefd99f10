package fleet

import (
	"time"
)

// Passive health (outlier ejection): a backend that keeps failing is taken out of routing
// for a while, without waiting for its heartbeats to expire. The signals come from the
// gateway's own traffic (connect failures, first-byte timeouts, a pylon answering that its
// engine is unreachable) and from the health probes. Ejection is per backend (all its
// models); the schedulers leave an ejected backend out of their candidates, within the
// per-target cap of Outlier.MaxEjectionPercent.

// Failure is what went wrong in one attempt or probe (the reason label of ejections).
type Failure uint8

// The failures that count towards ejection.
const (
	// FailConnect: the pylon could not be reached or closed the connection before
	// answering.
	FailConnect Failure = iota + 1
	// FailEngineUnreachable: the pylon answered that it could not reach its engine.
	FailEngineUnreachable
	// FailFirstByteTimeout: no response byte arrived within the attempt's first-byte
	// deadline.
	FailFirstByteTimeout
	// FailProbe: a health probe failed (no answer in time, or a 5xx).
	FailProbe
	// FailUnresponsive: the attempt was abandoned, with no answer yet, because the pylon
	// answered no health probe (see Deps.OnUnresponsive).
	FailUnresponsive
)

var failureNames = [...]string{
	FailConnect:           "connect_failure",
	FailEngineUnreachable: "engine_unreachable",
	FailFirstByteTimeout:  "first_byte_timeout",
	FailProbe:             "health_probe_failed",
	FailUnresponsive:      "pylon_unresponsive",
}

// Failures lists every failure (for pre-creating metric series).
var Failures = []Failure{FailConnect, FailEngineUnreachable, FailFirstByteTimeout, FailProbe, FailUnresponsive}

// String returns the failure's metric label.
func (f Failure) String() string {
	if int(f) < len(failureNames) && failureNames[f] != "" {
		return failureNames[f]
	}
	return "unknown"
}

// Defaults of Outlier.
const (
	DefaultConsecutiveFailures = 3
	DefaultBaseEjection        = time.Second
	DefaultMaxEjection         = 30 * time.Second
	DefaultMaxEjectionPercent  = 50
)

// Outlier is the ejection policy.
type Outlier struct {
	// ConsecutiveFailures ejects a backend after this many failures in a row with no
	// successful request in between (0 = ejection off).
	ConsecutiveFailures int
	// BaseEjection is the first ejection's length; each further ejection without a
	// successful request in between doubles it, up to MaxEjection.
	BaseEjection time.Duration
	MaxEjection  time.Duration
	// MaxEjectionPercent bounds the backends of one routing target that ejection takes
	// out of routing at once: at most this percent of them, but always at least one
	// (100 = every backend may be ejected). The schedulers enforce it (see dispatch).
	MaxEjectionPercent int
}

// enabled reports whether ejection is on.
func (o *Outlier) enabled() bool { return o.ConsecutiveFailures > 0 }

// backoff is the length of the level-th ejection in a row (level 1 is the first).
func (o *Outlier) backoff(level int) time.Duration {
	d := o.BaseEjection
	for i := 1; i < level && d < o.MaxEjection; i++ {
		d *= 2
	}
	return min(d, o.MaxEjection)
}

// Messages of the passive health signals.
type (
	// succeeded: a request got an answer from the pylon (sent only while the backend
	// has failures on record, see Backend.failing).
	succeeded struct{}
	// failed: an attempt or probe failed.
	failed struct{ why Failure }
)

// health is a backend actor's outlier state.
type health struct {
	consecutive int       // failures since the last successful request
	level       int       // ejections in a row without a successful request in between
	ejected     bool      // out of routing until until
	at, until   time.Time // when the current ejection began and ends
	reason      Failure   // what triggered the current (or last) ejection
	ejections   uint64    // ejections so far
	// probeFailing says the last health probe failed; probeSeen says a probe failed
	// during the current ejection (a passing probe then ends it early).
	probeFailing bool
	probeSeen    bool
}

// ReportSuccess tells b's actor that a request got an answer from its pylon. It costs an
// atomic load unless b has failures on record.
func (f *Fleet) ReportSuccess(b *Backend) {
	if b.failing.Load() {
		f.deps.System.Root.Send(b.pid, succeeded{})
	}
}

// ReportFailure tells b's actor that an attempt on it failed.
func (f *Fleet) ReportFailure(b *Backend, why Failure) {
	f.deps.System.Root.Send(b.pid, failed{why: why})
}

// Ejected returns the number of backends ejected right now.
func (f *Fleet) Ejected() int { return int(f.ejected.Load()) }

// onFailed counts a failure and ejects the backend once the failures in a row reach the
// threshold (a backend just back from an ejection is ejected again at its first failure).
func (a *backendActor) onFailed(m failed, now time.Time) {
	out := &a.fleet.deps.Outlier
	h := &a.health
	if m.why == FailProbe {
		h.probeFailing = true
		if h.ejected {
			h.probeSeen = true
		}
	}
	if !out.enabled() {
		return
	}
	h.consecutive++
	a.b.failing.Store(true)
	if h.ejected || h.consecutive < out.ConsecutiveFailures {
		return
	}
	a.eject(m.why, now)
}

// onSucceeded resets the failure count and the backoff.
func (a *backendActor) onSucceeded() {
	h := &a.health
	h.consecutive, h.level = 0, 0
	if !h.ejected {
		a.b.failing.Store(false)
	}
}

// onProbeOK notes a passing health probe: it ends an ejection during which a probe
// failed (the probes saw the outage, and now see it over).
func (a *backendActor) onProbeOK(now time.Time) {
	h := &a.health
	h.probeFailing = false
	if h.ejected && h.probeSeen {
		a.readmit(now, "health_probe_passed")
	}
}

func (a *backendActor) eject(why Failure, now time.Time) {
	out := &a.fleet.deps.Outlier
	h := &a.health
	h.level++
	h.ejected, h.reason, h.probeSeen = true, why, why == FailProbe
	h.at, h.until = now, now.Add(out.backoff(h.level))
	h.ejections++
	a.fleet.ejected.Add(1)
	a.fleet.deps.Logger.Warn("backend_ejected", "backend", a.b.ID, "reason", why.String(),
		"for", h.until.Sub(now).String(), "consecutive_failures", h.consecutive, "ejections_in_a_row", h.level)
	if a.fleet.deps.OnEjected != nil {
		a.fleet.deps.OnEjected(a.b.ID, why)
	}
	a.notifyAll()
}

// readmit ends the current ejection. The backend stays on probation: one more failure
// before a successful request ejects it again, for twice as long.
func (a *backendActor) readmit(now time.Time, why string) {
	h := &a.health
	if !h.ejected {
		return
	}
	a.leave()
	h.consecutive = max(a.fleet.deps.Outlier.ConsecutiveFailures-1, 0)
	a.fleet.deps.Logger.Info("backend_readmitted", "backend", a.b.ID, "after", now.Sub(h.at).String(), "why", why)
	a.notifyAll()
}

// checkEjection ends an ejection whose time is up: the backend is readmitted unless the
// last health probe failed, in which case it is ejected again at once (longer).
func (a *backendActor) checkEjection(now time.Time) {
	h := &a.health
	if !h.ejected || now.Before(h.until) {
		return
	}
	if h.probeFailing {
		a.leave()
		a.eject(FailProbe, now)
		return
	}
	a.readmit(now, "ejection_over")
}

// leave ends the backend's ejection, if any, in its state and the fleet's count (when it
// is readmitted, ejected again or goes away).
func (a *backendActor) leave() {
	if a.health.ejected {
		a.health.ejected = false
		a.fleet.ejected.Add(-1)
	}
}

// notifyAll tells every model's scheduler about a change of the backend's health.
func (a *backendActor) notifyAll() {
	for _, mv := range a.models {
		a.notify(mv)
	}
}

// EjectionState is a backend's outlier state in State.
type EjectionState struct {
	Ejected             bool      `json:"ejected"`
	Until               time.Time `json:"until,omitzero"`
	Reason              string    `json:"reason,omitempty"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	// Level counts the ejections in a row without a successful request in between (the
	// current backoff is BaseEjection × 2^(Level−1)).
	Level     int    `json:"level"`
	Ejections uint64 `json:"ejections_total"`
}

func (h *health) state() EjectionState {
	s := EjectionState{Ejected: h.ejected, ConsecutiveFailures: h.consecutive, Level: h.level, Ejections: h.ejections}
	if h.ejected {
		s.Until = h.until
	}
	if h.reason != 0 {
		s.Reason = h.reason.String()
	}
	return s
}

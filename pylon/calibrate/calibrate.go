// Package calibrate is the pure step plan of the pylon's input-throughput calibration
// (the reference pylon's ramp): step k sends Requests×2^k synthetic requests of
// min(256×2^k, max units) prompt tokens with min(1+k, max) of them in flight. A step that
// exceeds the calibration timeout means saturation and ends the ramp; a prompt-too-long
// answer clamps every later prompt to the last size that succeeded. The ramp ends after
// the first step run with both the prompt size and the concurrency at their caps.
// No clock and no I/O: the runner in package pylon measures and reports outcomes.
package calibrate

import "errors"

// Defaults (the reference pylon's).
const (
	DefaultRequests       = 5
	DefaultPromptUnits    = 4096
	DefaultMaxConcurrency = 4
	// BasePromptTokens is the prompt size of step 0; it doubles per step.
	BasePromptTokens = 256
	// maxShift bounds 2^k so that sizes never overflow.
	maxShift = 40
)

// Config is the ramp's shape.
type Config struct {
	Requests       int // step 0 request count (doubles per step), > 0
	MaxPromptUnits int // prompt size cap in tokens, > 0
	MaxConcurrency int // concurrency cap, > 0
}

// ErrConfig is returned for a non-positive field.
var ErrConfig = errors.New("calibration: requests, prompt units and max concurrency must be > 0")

// Validate checks that every field is positive.
func (c Config) Validate() error {
	if c.Requests <= 0 || c.MaxPromptUnits <= 0 || c.MaxConcurrency <= 0 {
		return ErrConfig
	}
	return nil
}

// Step is one ramp step.
type Step struct {
	Index        int // k
	PromptTokens int // min(256×2^k, cap), clamped after prompt-too-long answers
	Requests     int // Requests×2^k
	Concurrency  int // min(1+k, MaxConcurrency)
}

// Outcome is what the runner observed for one step.
type Outcome struct {
	// Saturated: the step exceeded the calibration timeout.
	Saturated bool
	// PromptTooLong: at least one request was refused as too long (a 4xx from the engine).
	PromptTooLong bool
}

// Reason tells why a plan ended.
type Reason string

// Why a plan ended.
const (
	ReasonCompleted     Reason = "completed"       // the last step ran at both caps
	ReasonSaturated     Reason = "saturated"       // a step exceeded the timeout
	ReasonPromptTooLong Reason = "prompt_too_long" // too long even with no successful size to fall back to
)

// Plan is the ramp's state. The zero value is not usable; call New.
type Plan struct {
	cfg       Config
	k         int
	promptCap int // MaxPromptUnits, lowered by prompt-too-long answers
	lastOK    int // prompt size of the last step without a too-long answer (0 = none)
	done      bool
	reason    Reason
}

// New starts a plan; cfg must be valid.
func New(cfg Config) (*Plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Plan{cfg: cfg, promptCap: cfg.MaxPromptUnits}, nil
}

// StepAt is step k of cfg with the prompt capped at promptCap.
func StepAt(cfg Config, k, promptCap int) Step {
	shift := min(k, maxShift)
	prompt := promptCap
	if BasePromptTokens<<shift < promptCap {
		prompt = BasePromptTokens << shift
	}
	return Step{
		Index: k, PromptTokens: prompt,
		Requests:    cfg.Requests << shift,
		Concurrency: min(1+k, cfg.MaxConcurrency),
	}
}

// Next returns the step to run, or false once the plan has ended.
func (p *Plan) Next() (Step, bool) {
	if p.done {
		return Step{}, false
	}
	return StepAt(p.cfg, p.k, p.promptCap), true
}

// Report records the outcome of the step Next returned and advances the plan.
func (p *Plan) Report(o Outcome) {
	if p.done {
		return
	}
	s := StepAt(p.cfg, p.k, p.promptCap)
	switch {
	case o.Saturated:
		p.finish(ReasonSaturated)
		return
	case o.PromptTooLong:
		if p.lastOK == 0 {
			p.finish(ReasonPromptTooLong)
			return
		}
		p.promptCap = p.lastOK
	default:
		p.lastOK = s.PromptTokens
		if s.PromptTokens >= p.promptCap && s.Concurrency >= p.cfg.MaxConcurrency {
			p.finish(ReasonCompleted)
			return
		}
	}
	p.k++
}

func (p *Plan) finish(r Reason) { p.done, p.reason = true, r }

// Done reports whether the plan ended and why.
func (p *Plan) Done() (Reason, bool) { return p.reason, p.done }

package latency

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of the batched model: the reference mock engine's h100-llama-3.1-8b profile
// (Llama 3.1 8B on one H100).
const (
	DefaultWorkers             = 1
	DefaultMaxNumSeqs          = 25
	DefaultMaxBatchedTokens    = 2048
	DefaultStepFixed           = 4 * time.Millisecond
	DefaultStepPerDecodeSeq    = 85 * time.Microsecond
	DefaultStepPerPrefillToken = 50 * time.Microsecond
)

// BatchedConfig configures the continuous-batching model. A zero field means the default
// constant of the same name.
type BatchedConfig struct {
	// Workers is the number of independent GPU workers (default 1).
	Workers int
	// MaxNumSeqs is the number of sequences a worker runs at once (default 25).
	MaxNumSeqs int
	// MaxBatchedTokens is the token budget of one step: one per decoding sequence plus the
	// prefill chunk (default 2048).
	MaxBatchedTokens int
	// StepFixed is the fixed cost of a step (default 4 ms).
	StepFixed time.Duration
	// StepPerDecodeSeq is the cost of a step per decoding sequence (default 0.085 ms).
	StepPerDecodeSeq time.Duration
	// StepPerPrefillToken is the cost of a step per prefill token (default 0.05 ms).
	StepPerPrefillToken time.Duration
	// TimeScale multiplies every step time; zero means 1.
	TimeScale float64
}

// ErrBatchedConfig is the class of BatchedConfig validation errors.
var ErrBatchedConfig = errors.New("invalid batched model config")

// Validate returns one error per bad field, joined.
func (c BatchedConfig) Validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%w: %s is %v, want %s", ErrBatchedConfig, field, v, want))
	}
	if c.Workers < 0 {
		bad("workers", c.Workers, "≥ 0")
	}
	if c.MaxNumSeqs < 0 {
		bad("max_num_seqs", c.MaxNumSeqs, "≥ 0")
	}
	if c.MaxBatchedTokens < 0 {
		bad("max_batched_tokens", c.MaxBatchedTokens, "≥ 0")
	}
	if d := c.withDefaults(); d.MaxBatchedTokens <= d.MaxNumSeqs {
		bad("max_batched_tokens", d.MaxBatchedTokens, fmt.Sprintf("> max_num_seqs (%d)", d.MaxNumSeqs))
	}
	if c.StepFixed < 0 {
		bad("step_fixed", c.StepFixed, "≥ 0")
	}
	if c.StepPerDecodeSeq < 0 {
		bad("step_per_decode_seq", c.StepPerDecodeSeq, "≥ 0")
	}
	if c.StepPerPrefillToken < 0 {
		bad("step_per_prefill_token", c.StepPerPrefillToken, "≥ 0")
	}
	if c.TimeScale < 0 {
		bad("time_scale", c.TimeScale, "≥ 0")
	}
	return errors.Join(errs...)
}

func (c BatchedConfig) withDefaults() BatchedConfig {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.MaxBatchedTokens == 0 {
		c.MaxBatchedTokens = DefaultMaxBatchedTokens
	}
	if c.StepFixed == 0 {
		c.StepFixed = DefaultStepFixed
	}
	if c.StepPerDecodeSeq == 0 {
		c.StepPerDecodeSeq = DefaultStepPerDecodeSeq
	}
	if c.StepPerPrefillToken == 0 {
		c.StepPerPrefillToken = DefaultStepPerPrefillToken
	}
	return c
}

// WithDefaults returns c with every zero field replaced by its default.
func (c BatchedConfig) WithDefaults() BatchedConfig { return c.withDefaults() }

// StepTime returns the duration of one step with the given number of decoding sequences
// and prefill tokens.
func (c BatchedConfig) StepTime(decodingSeqs, prefillTokens int) time.Duration {
	d := c.StepFixed + time.Duration(decodingSeqs)*c.StepPerDecodeSeq + time.Duration(prefillTokens)*c.StepPerPrefillToken
	return Scale(d, c.TimeScale)
}

// EventKind says what happened to a sequence at the end of a step.
type EventKind uint8

// The event kinds.
const (
	// FirstToken: prefill finished and the first output token was produced.
	FirstToken EventKind = iota + 1
	// Token: one more output token was produced.
	Token
)

// Event reports output of one sequence at the end of a step.
type Event struct {
	// ID is the sequence ID given to Submit.
	ID uint64
	// Kind is FirstToken or Token.
	Kind EventKind
	// Generated is the number of output tokens produced so far (≥ 1).
	Generated int
	// Finished is true when Generated reached the requested output tokens.
	Finished bool
	// At is the end of the step that produced the token.
	At time.Time
}

// Seq is a sequence submitted to the batched model.
type Seq struct {
	// ID identifies the sequence in events and Cancel; it must be unique among live sequences.
	ID uint64
	// Worker is the worker index (see Batched.Pick).
	Worker int
	// PrefillTokens is the number of uncached input tokens to compute; at least one token
	// is always computed.
	PrefillTokens int
	// OutputTokens is the number of tokens to generate (at least 1).
	OutputTokens int
}

type seq struct {
	Seq
	prefillLeft int
	chunk       int // prefill tokens scheduled in the current step
	decoding    bool
	generated   int
	cancelled   bool
}

type worker struct {
	running  []*seq
	waiting  []*seq
	busy     bool
	stepEnd  time.Time
	stepSeqs []*seq // sequences in the current step (decoding or prefill chunk)
}

// Batched simulates continuous batching on one or more workers: each worker runs up to
// MaxNumSeqs sequences; a step serves one token to every decoding sequence plus prefill
// chunks of waiting prompts (first come, first served) within MaxBatchedTokens, and lasts
// StepFixed + StepPerDecodeSeq × decoding + StepPerPrefillToken × prefill tokens. A
// prompt's first token appears at the end of the step that finishes its prefill; each later
// step adds one token.
//
// Batched is a pure state machine: the caller submits sequences and advances it with
// explicit times. It is not safe for concurrent use.
type Batched struct {
	cfg     BatchedConfig
	workers []worker
	seqs    map[uint64]*seq
}

// NewBatched returns an idle model. cfg must be valid (see BatchedConfig.Validate).
func NewBatched(cfg BatchedConfig) *Batched {
	cfg = cfg.withDefaults()
	return &Batched{cfg: cfg, workers: make([]worker, cfg.Workers), seqs: make(map[uint64]*seq)}
}

// Config returns the configuration with defaults applied.
func (b *Batched) Config() BatchedConfig { return b.cfg }

// MaxConcurrency returns Workers × MaxNumSeqs, the engine's concurrency.
func (b *Batched) MaxConcurrency() int { return b.cfg.Workers * b.cfg.MaxNumSeqs }

// Pick chooses a worker for a request: the worker whose cache holds the most tokens of
// its prefix (cachedTokens[i] for worker i; ties to the lowest index), or when no worker
// holds any, the least-loaded worker (fewest running plus waiting sequences).
func (b *Batched) Pick(cachedTokens []uint64) int {
	best, bestCached := -1, uint64(0)
	for i, c := range cachedTokens {
		if i < len(b.workers) && c > bestCached {
			best, bestCached = i, c
		}
	}
	if best >= 0 {
		return best
	}
	best, bestLoad := 0, -1
	for i := range b.workers {
		load := len(b.workers[i].running) + len(b.workers[i].waiting)
		if bestLoad < 0 || load < bestLoad {
			best, bestLoad = i, load
		}
	}
	return best
}

// Load returns the running (admitted to a batch) and waiting sequences over all workers.
func (b *Batched) Load() (running, waiting int) {
	for i := range b.workers {
		running += len(b.workers[i].running)
		waiting += len(b.workers[i].waiting)
	}
	return running, waiting
}

// Submit queues s on its worker at now. If the worker is idle a step starts at now.
// Call Advance(now) first so that the model's state is current.
func (b *Batched) Submit(now time.Time, s Seq) {
	if s.Worker < 0 || s.Worker >= len(b.workers) {
		s.Worker = 0
	}
	if s.OutputTokens < 1 {
		s.OutputTokens = 1
	}
	q := &seq{Seq: s, prefillLeft: max(s.PrefillTokens, 1)}
	b.seqs[s.ID] = q
	w := &b.workers[s.Worker]
	w.waiting = append(w.waiting, q)
	if !w.busy {
		b.startStep(w, now)
	}
}

// Cancel removes a sequence; it produces no more events. Unknown IDs are ignored.
func (b *Batched) Cancel(id uint64) {
	q, ok := b.seqs[id]
	if !ok {
		return
	}
	q.cancelled = true
	delete(b.seqs, id)
	w := &b.workers[q.Worker]
	w.running = removeSeq(w.running, q)
	w.waiting = removeSeq(w.waiting, q)
}

// Next returns the end of the earliest step in progress; ok is false when every worker is idle.
func (b *Batched) Next() (at time.Time, ok bool) {
	for i := range b.workers {
		w := &b.workers[i]
		if w.busy && (!ok || w.stepEnd.Before(at)) {
			at, ok = w.stepEnd, true
		}
	}
	return at, ok
}

// Advance completes every step that ends at or before now, starting the following steps
// back to back, and appends the resulting events to dst in time order per worker.
func (b *Batched) Advance(now time.Time, dst []Event) []Event {
	for i := range b.workers {
		w := &b.workers[i]
		for w.busy && !w.stepEnd.After(now) {
			dst = b.finishStep(w, dst)
			b.startStep(w, w.stepEnd)
		}
	}
	return dst
}

func (b *Batched) startStep(w *worker, at time.Time) {
	for len(w.running) < b.cfg.MaxNumSeqs && len(w.waiting) > 0 {
		w.running = append(w.running, w.waiting[0])
		w.waiting[0] = nil
		w.waiting = w.waiting[1:]
	}
	w.stepSeqs = w.stepSeqs[:0]
	decoding := 0
	for _, q := range w.running {
		if q.decoding {
			decoding++
			w.stepSeqs = append(w.stepSeqs, q)
		}
	}
	budget := b.cfg.MaxBatchedTokens - decoding
	prefill := 0
	for _, q := range w.running {
		if q.decoding || budget <= 0 {
			continue
		}
		q.chunk = min(q.prefillLeft, budget)
		budget -= q.chunk
		prefill += q.chunk
		w.stepSeqs = append(w.stepSeqs, q)
	}
	if len(w.stepSeqs) == 0 {
		w.busy = false
		return
	}
	w.busy = true
	w.stepEnd = at.Add(b.cfg.StepTime(decoding, prefill))
}

func (b *Batched) finishStep(w *worker, dst []Event) []Event {
	done := false
	for _, q := range w.stepSeqs {
		if q.cancelled {
			continue
		}
		kind := Token
		if q.decoding {
			q.generated++
		} else {
			q.prefillLeft -= q.chunk
			q.chunk = 0
			if q.prefillLeft > 0 {
				continue
			}
			q.decoding = true
			q.generated = 1
			kind = FirstToken
		}
		fin := q.generated >= q.OutputTokens
		dst = append(dst, Event{ID: q.ID, Kind: kind, Generated: q.generated, Finished: fin, At: w.stepEnd})
		if fin {
			q.cancelled = true
			delete(b.seqs, q.ID)
			done = true
		}
	}
	if done {
		kept := w.running[:0]
		for _, q := range w.running {
			if !q.cancelled {
				kept = append(kept, q)
			}
		}
		clear(w.running[len(kept):])
		w.running = kept
	}
	return dst
}

func removeSeq(list []*seq, q *seq) []*seq {
	for i, x := range list {
		if x == q {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			return list[:len(list)-1]
		}
	}
	return list
}

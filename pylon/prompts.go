package pylon

import (
	"sync"
	"time"
)

// Where a prompt counts as cached on the engine (Config.PromptCachedAt).
const (
	// PromptCachedAtFirstOutput: at the first output byte of the answer (streamed) or at
	// its end (buffered). Right for engines that send streamed response headers before
	// the prefill, as vLLM and SGLang do.
	PromptCachedAtFirstOutput = "first-output"
	// PromptCachedAtHeaders: at the response headers. Right for engines that send them only
	// once the prompt is prefilled, as the bundled mock engine does.
	PromptCachedAtHeaders = "headers"
)

// maxPromptKeys bounds the prompt table: a request that finds it full is relayed at once
// and not recorded.
const maxPromptKeys = 65536

// promptTable remembers, per cache-affinity key, the request whose prompt the engine is
// prefilling. A later request with the same key that arrives meanwhile — from any gateway
// replica — waits for that prompt to be cached instead of prefilling the shared prefix a
// second time beside it (an engine caches a prefix only once it has computed it).
//
// One request per key is recorded: the first that finds no entry. Requests that waited
// for it go on together when it is released and are not recorded themselves (each then
// prefills only its own suffix); the next request that finds no entry is recorded.
type promptTable struct {
	mu   sync.Mutex
	m    map[string]*promptTurn
	max  int
	wait time.Duration // longest wait (Config.PromptWait)
}

// promptTurn is one recorded request's prompt in flight.
type promptTurn struct {
	t      *promptTable
	key    string
	tokens uint64        // the request's input tokens: its prompt, once cached
	done   chan struct{} // closed by release
	// closed is set under t.mu by the first release.
	closed bool
}

func newPromptTable(wait time.Duration) *promptTable {
	if wait <= 0 {
		return nil
	}
	return &promptTable{m: make(map[string]*promptTurn), max: maxPromptKeys, wait: wait}
}

// enter looks key up. When another request's prompt with the key is in flight it returns
// that prompt's done channel (wait on it, then relay without recording) and its input
// tokens; else, when record, it records the caller's prompt of tokens and returns its turn
// (release it once the prompt is cached or the request ended), or nothing when the table
// is full. A nil table records nothing.
// The key is copied only when it is recorded: a lookup allocates nothing.
func (t *promptTable) enter(key []byte, tokens uint64, record bool) (*promptTurn, <-chan struct{}, uint64) {
	if t == nil || len(key) == 0 {
		return nil, nil, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.m[string(key)]; ok {
		return nil, cur.done, cur.tokens
	}
	if !record || len(t.m) >= t.max {
		return nil, nil, 0
	}
	turn := &promptTurn{t: t, key: string(key), tokens: tokens, done: make(chan struct{})}
	t.m[turn.key] = turn
	return turn, nil, 0
}

// release ends the turn: its waiters go on and the key is forgotten. Idempotent; nil-safe.
func (pt *promptTurn) release() {
	if pt == nil {
		return
	}
	t := pt.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if pt.closed {
		return
	}
	pt.closed = true
	if t.m[pt.key] == pt {
		delete(t.m, pt.key)
	}
	close(pt.done)
}

// size returns the number of prompts in flight.
func (t *promptTable) size() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Outcomes of a wait for a prompt in flight (the prompt_waits_total label).
const (
	promptWaitCached  = "cached"
	promptWaitTimeout = "timeout"
)

// await waits for done, at most t.wait; it reports whether the prompt was released in time.
func (t *promptTable) await(done <-chan struct{}) bool {
	timer := time.NewTimer(t.wait)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}

// waitPrompt waits for a prompt in flight (at most Config.PromptWait) and records the wait.
func (p *Pylon) waitPrompt(done <-chan struct{}) {
	if done == nil {
		return
	}
	start := time.Now()
	cached := p.prompts.await(done)
	p.metrics.promptWaited(time.Since(start), cached)
}

package pylon_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// A streamed request whose x-cache-affinity-key's prompt the engine is prefilling for an
// earlier request waits until that prompt is cached (at its response headers or its first
// output, per --prompt-cached-at), then prefills only its own suffix; a request with
// another key does not wait, and with --prompt-wait 0 nobody does. Virtual time: the
// mock prefills 1 000 tokens per second, then sends its headers and first body bytes, and
// the first token 300 ms later.
func TestHermeticPromptWait(t *testing.T) {
	const ttft = 300 * time.Millisecond
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		cachedAt string
		// release is when the first request's prompt counts as cached (0: no wait).
		release time.Duration
	}{
		{"headers", 30 * time.Second, pylon.PromptCachedAtHeaders, 2 * time.Second},
		{"first output", 30 * time.Second, pylon.PromptCachedAtFirstOutput, 2*time.Second + ttft},
		{"off", 0, pylon.PromptCachedAtHeaders, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := pylon.DefaultConfig()
				cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
				cfg.PromptWait, cfg.PromptCachedAt = tc.wait, tc.cachedAt
				h := newHermetic(t, cfg, mock.Config{PrefillTokensPerSecond: 1000, KVCacheCapacityTokens: 1 << 20, TTFT: ttft, TokenDelay: time.Millisecond, NumTokens: 2})
				defer h.close()
				h.await(time.Second, running(0))

				const path = "/v1/chat/completions"
				session := map[string]string{wire.HeaderCacheAffinityKey: "session-1"}
				var wg sync.WaitGroup
				var first, follower, stranger outcome
				wg.Go(func() { first = h.sendWith(path, "first", 2000, streamBody, nil, session) })
				time.Sleep(100 * time.Millisecond)
				wg.Go(func() { follower = h.sendWith(path, "follower", 2500, streamBody, nil, session) })
				wg.Go(func() {
					stranger = h.sendWith(path, "stranger", 2000, streamBody, nil, map[string]string{wire.HeaderCacheAffinityKey: "session-2"})
				})
				// At 1 s every request is admitted and none has its headers: a follower's
				// queued work is only the suffix beyond the prompt it waits for.
				time.Sleep(900 * time.Millisecond)
				wantQueued := 2000.0 + 500 + 2000
				if tc.release == 0 {
					wantQueued = 2000 + 2500 + 2000
				}
				if got := h.scrapeMetric(`pylon_requests_state_input_tokens{model="dummy-model",state="pending"}`); got != wantQueued {
					t.Errorf("pending input tokens %v at 1 s, want %v", got, wantQueued)
				}
				wg.Wait()
				for name, o := range map[string]*outcome{"first": &first, "follower": &follower, "stranger": &stranger} {
					if o.err != nil || o.status != 200 {
						t.Fatalf("%s: %d %v %s", name, o.status, o.err, o.body)
					}
				}
				if got := first.header["x-kv-cache-reused-input-tokens"]; got != "0" {
					t.Errorf("first reused %s tokens, want 0", got)
				}
				if got := stranger.header["x-kv-cache-reused-input-tokens"]; got != "0" {
					t.Errorf("another key's request reused %s tokens, want 0", got)
				}
				// The mock sends its headers and first body bytes once the prompt is prefilled.
				if stranger.firstChunk != 2*time.Second {
					t.Errorf("another key's request: first bytes %v after sending, want 2s (no wait)", stranger.firstChunk)
				}
				wantReused, wantFirst := "2000", tc.release+500*time.Millisecond // the 500-token suffix
				if tc.release == 0 {
					wantReused, wantFirst = "0", 100*time.Millisecond+2500*time.Millisecond
				}
				if got := follower.header["x-kv-cache-reused-input-tokens"]; got != wantReused {
					t.Errorf("follower reused %s tokens, want %s", got, wantReused)
				}
				if got := follower.firstChunk + 100*time.Millisecond; got != wantFirst {
					t.Errorf("follower's first bytes at %v, want %v", got, wantFirst)
				}
				waits := 0.0
				if tc.release != 0 {
					waits = 1
				}
				if got := h.scrapeMetric(`pylon_prompt_waits_total{outcome="cached"}`); got != waits {
					t.Errorf("prompt_waits_total{cached} = %v, want %v", got, waits)
				}
				if got := h.scrapeMetric(`pylon_prompts_inflight`); got != 0 {
					t.Errorf("prompts_inflight = %v after every request ended, want 0", got)
				}
			})
		})
	}
}

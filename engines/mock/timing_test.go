package mock_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/latency"
	"github.com/switchyard/switchyard/engines/mock"
)

var legacyCfg = mock.Config{
	ModelNames:             []string{"m"},
	NumTokens:              5,
	TTFT:                   50 * time.Millisecond,
	TTFTJitter:             20 * time.Millisecond,
	TokenDelay:             10 * time.Millisecond,
	DecodeJitter:           5 * time.Millisecond,
	PrefillTokensPerSecond: 1000,
	KVCacheCapacityTokens:  10_000,
	Seed:                   42,
}

func legacyModel(cfg mock.Config) latency.Legacy {
	return latency.Legacy{
		TTFT: cfg.TTFT, TTFTJitter: cfg.TTFTJitter, TokenDelay: cfg.TokenDelay, DecodeJitter: cfg.DecodeJitter,
		PrefillTokensPerSecond: cfg.PrefillTokensPerSecond, TimeScale: cfg.TimeScale, Seed: cfg.Seed,
	}
}

// contentTimes returns the arrival time of each content chunk of a chat stream.
func contentTimes(t *testing.T, events []sseEvent) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range events {
		if e.data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e.data), &chunk); err != nil {
			t.Fatalf("bad chunk %q: %v", e.data, err)
		}
		if len(chunk.Choices) == 1 && chunk.Choices[0].Delta.Content != nil && *chunk.Choices[0].Delta.Content != "" {
			out = append(out, e.at)
		}
	}
	return out
}

// On virtual time, TTFT is exactly uncached/prefill rate + TTFT + the request's jitter, every
// later token exactly its delay + jitter, and a warm prefix pays only for its suffix.
func TestLegacyTimingIsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, legacyCfg)
		defer h.stop()
		m := legacyModel(legacyCfg)
		for _, tc := range []struct {
			id                string
			input             int
			wantReused        string
			wantUncached      uint64
			wantHit           string
			wantEvictedTokens string
		}{
			{id: "r1", input: 500, wantReused: "0", wantUncached: 500, wantHit: "false", wantEvictedTokens: "0"},
			{id: "r2", input: 800, wantReused: "500", wantUncached: 300, wantHit: "true", wantEvictedTokens: "0"},
			{id: "r3", input: 800, wantReused: "800", wantUncached: 0, wantHit: "true", wantEvictedTokens: "0"},
		} {
			start := time.Now()
			hdr, events, err := h.stream(call{
				method: "POST", path: "/v1/chat/completions", body: chatBody(true, "hi"),
				headers: hdrs("x-request-id", tc.id, "x-input-tokens", strconv.Itoa(tc.input), "x-cache-affinity-key", "conv-1"),
			})
			if err != nil {
				t.Fatalf("%s: stream: %v", tc.id, err)
			}
			got := map[string]string{
				"hit": string(hdr.Peek("x-kv-cache-hit")), "reused": string(hdr.Peek("x-kv-cache-reused-input-tokens")),
				"uncached": string(hdr.Peek("x-kv-cache-uncached-input-tokens")), "evicted_tokens": string(hdr.Peek("x-kv-cache-evicted-tokens")),
			}
			want := map[string]string{"hit": tc.wantHit, "reused": tc.wantReused, "uncached": strconv.FormatUint(tc.wantUncached, 10), "evicted_tokens": tc.wantEvictedTokens}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: kv headers (-want +got):\n%s", tc.id, diff)
			}
			times := contentTimes(t, events)
			if len(times) != legacyCfg.NumTokens {
				t.Fatalf("%s: %d content chunks, want %d", tc.id, len(times), legacyCfg.NumTokens)
			}
			wantTTFT := time.Duration(tc.wantUncached)*time.Millisecond + 50*time.Millisecond +
				latency.Jitter(legacyCfg.Seed, tc.id, "ttft", -1, 20*time.Millisecond)
			if ttft := times[0].Sub(start); ttft != wantTTFT {
				t.Errorf("%s: TTFT = %v, want %v", tc.id, ttft, wantTTFT)
			}
			for i := 1; i < len(times); i++ {
				if gap, want := times[i].Sub(times[i-1]), m.TokenGap(tc.id, i); gap != want {
					t.Errorf("%s: gap before token %d = %v, want %v", tc.id, i, gap, want)
				}
			}
			if total, want := times[len(times)-1].Sub(start), m.Total(tc.id, tc.wantUncached, legacyCfg.NumTokens); total != want {
				t.Errorf("%s: last token at %v, want %v", tc.id, total, want)
			}
		}
	})
}

// A non-streaming request answers after exactly the model's total time.
func TestLegacyNonStreamingTotal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := legacyCfg
		cfg.TimeScale = 0.5
		h := start(t, cfg)
		defer h.stop()
		start := time.Now()
		resp := h.do(call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, strings.Repeat("x", 200)), headers: hdrs("x-request-id", "nb")})
		elapsed := time.Since(start)
		if want := legacyModel(cfg).Total("nb", 200, 5); elapsed != want {
			t.Errorf("elapsed %v, want %v", elapsed, want)
		}
		var body struct {
			Object  string `json:"object"`
			Choices []struct {
				Message      struct{ Role, Content string } `json:"message"`
				FinishReason string                         `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				TotalTokens      int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(resp.Body(), &body); err != nil {
			t.Fatalf("body %q: %v", resp.Body(), err)
		}
		if body.Object != "chat.completion" || len(body.Choices) != 1 || body.Choices[0].Message.Role != "assistant" ||
			body.Choices[0].FinishReason != "stop" || body.Usage.PromptTokens != 200 || body.Usage.CompletionTokens != 5 || body.Usage.TotalTokens != 205 {
			t.Errorf("unexpected body %s", resp.Body())
		}
	})
}

// Evictions follow LRU order and are reported in the headers of the request that caused them.
func TestKVCacheEvictionHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := legacyCfg
		cfg.KVCacheCapacityTokens = 1000
		cfg.PrefillTokensPerSecond = 0
		cfg.TTFT, cfg.TokenDelay = 0, 0
		h := start(t, cfg)
		defer h.stop()
		send := func(key string, input int) []string {
			resp := h.do(call{
				method: "POST", path: "/v1/chat/completions", body: chatBody(false, "x"),
				headers: hdrs("x-cache-affinity-key", key, "x-input-tokens", strconv.Itoa(input)),
			})
			return []string{
				string(resp.Header.Peek("x-kv-cache-hit")), string(resp.Header.Peek("x-kv-cache-reused-input-tokens")),
				string(resp.Header.Peek("x-kv-cache-evicted-entries")), string(resp.Header.Peek("x-kv-cache-evicted-tokens")),
			}
		}
		steps := []struct {
			key   string
			input int
			want  []string
		}{
			{"a", 400, []string{"false", "0", "0", "0"}},
			{"b", 300, []string{"false", "0", "0", "0"}},
			{"a", 400, []string{"true", "400", "0", "0"}},  // a is now most recent; b least
			{"c", 500, []string{"false", "0", "1", "300"}}, // evicts b only
			{"b", 300, []string{"false", "0", "1", "400"}}, // b was evicted; storing it evicts a (LRU)
			{"c", 500, []string{"true", "500", "0", "0"}},
		}
		for i, s := range steps {
			if diff := cmp.Diff(s.want, send(s.key, s.input)); diff != "" {
				t.Errorf("step %d (%s): hit, reused, evicted entries, evicted tokens (-want +got):\n%s", i, s.key, diff)
			}
		}
		var st map[string]any
		if err := json.Unmarshal(h.do(call{method: "GET", path: "/kv-cache/stats"}).Body(), &st); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			// Nothing runs: the 800 cached tokens are evictable, so none is used and all free.
			"model": "m", "kv_cache_capacity_tokens": 1000.0, "kv_cache_used_tokens": 0.0, "kv_cache_free_tokens": 1000.0,
			"kv_cache_entries": 2.0, "kv_cache_hit_count": 2.0, "kv_cache_miss_count": 4.0, "kv_cache_eviction_count": 2.0,
			"kv_cache_evicted_tokens": 700.0,
		}
		if diff := cmp.Diff(want, st); diff != "" {
			t.Errorf("kv stats (-want +got):\n%s", diff)
		}
	})
}

// While a request runs its prompt and output are the KV in use: /kv-cache/stats counts
// them as used (not free) until it finishes.
func TestKVInUseWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := legacyCfg
		cfg.KVCacheCapacityTokens = 1000
		cfg.TTFT, cfg.TTFTJitter, cfg.DecodeJitter, cfg.TokenDelay = 0, 0, 0, 100*time.Millisecond
		h := start(t, cfg)
		defer h.stop()
		stats := func() (used, free float64) {
			var st map[string]any
			if err := json.Unmarshal(h.do(call{method: "GET", path: "/kv-cache/stats"}).Body(), &st); err != nil {
				t.Fatal(err)
			}
			return st["kv_cache_used_tokens"].(float64), st["kv_cache_free_tokens"].(float64)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.do(call{
				method: "POST", path: "/v1/chat/completions", body: chatBody(false, "x"),
				headers: hdrs("x-cache-affinity-key", "k", "x-input-tokens", "300", "x-output-tokens", "5"),
			})
		}()
		time.Sleep(50 * time.Millisecond) // virtual time: the request is decoding
		synctest.Wait()
		if used, free := stats(); used != 305 || free != 695 {
			t.Errorf("while running: used %v, free %v; want 305 and 695", used, free)
		}
		<-done
		if used, free := stats(); used != 0 || free != 1000 {
			t.Errorf("after: used %v, free %v; want 0 and 1000", used, free)
		}
	})
}

// Without an affinity key the prompt's content blocks are the key: a conversation that
// grows reuses its earlier turns.
func TestPromptPrefixReuseWithoutKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := legacyCfg
		cfg.TTFT, cfg.TokenDelay, cfg.TTFTJitter, cfg.DecodeJitter = 0, 0, 0, 0
		h := start(t, cfg)
		defer h.stop()
		first := strings.Repeat("a", 640)
		h.do(call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, first)})
		start := time.Now()
		resp := h.do(call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, first+strings.Repeat("b", 100))})
		var reused, uncached int
		fmt.Sscan(string(resp.Header.Peek("x-kv-cache-reused-input-tokens")), &reused)
		fmt.Sscan(string(resp.Header.Peek("x-kv-cache-uncached-input-tokens")), &uncached)
		// The first 10 blocks of 64 bytes match; tokens are spread over blocks by bytes, so
		// about 640 of the 740 input tokens are reused.
		if reused < 620 || reused > 640 || reused+uncached != 740 {
			t.Errorf("reused %d, uncached %d; want ≈640 of 740 reused", reused, uncached)
		}
		if got, want := time.Since(start), time.Duration(uncached)*time.Millisecond; got != want {
			t.Errorf("prefill took %v, want %v", got, want)
		}
	})
}

// The semaphore serialises requests beyond --max-concurrent-requests.
func TestConcurrencyLimitQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := legacyCfg
		cfg.MaxConcurrentRequests = 1
		cfg.TTFTJitter, cfg.DecodeJitter, cfg.PrefillTokensPerSecond = 0, 0, 0
		h := start(t, cfg)
		defer h.stop()
		start := time.Now()
		var wg sync.WaitGroup
		ends := make([]time.Duration, 3)
		for i := range ends {
			wg.Go(func() {
				h.do(call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, "x")})
				ends[i] = time.Since(start)
			})
		}
		wg.Wait()
		one := 50*time.Millisecond + 4*10*time.Millisecond
		got := map[time.Duration]int{}
		for _, e := range ends {
			got[e]++
		}
		if diff := cmp.Diff(map[time.Duration]int{one: 1, 2 * one: 1, 3 * one: 1}, got); diff != "" {
			t.Errorf("completion times (-want +got):\n%s", diff)
		}
	})
}

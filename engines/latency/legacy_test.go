package latency_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/latency"
)

func TestJitterMatchesFNV1a(t *testing.T) {
	t.Parallel()
	// FNV-1a 64 of "r1ttft" computed by hand with the same constants, modulo 21.
	h := uint64(14695981039346656037)
	for _, c := range []byte("r1ttft") {
		h ^= uint64(c)
		h *= 1099511628211
	}
	want := time.Duration(h%21) * time.Millisecond
	if got := latency.Jitter(0, "r1", "ttft", -1, 20*time.Millisecond); got != want {
		t.Fatalf("Jitter = %v, want %v", got, want)
	}
	// The decimal index is hashed as if appended to the salt.
	if a, b := latency.Jitter(0, "r1", "decode-", 12, time.Second), latency.Jitter(0, "r1", "decode-12", -1, time.Second); a != b {
		t.Fatalf("indexed jitter %v != salted jitter %v", a, b)
	}
	if got := latency.Jitter(0, "r1", "ttft", -1, 0); got != 0 {
		t.Fatalf("zero bound gave %v", got)
	}
}

func TestJitterBounded(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.String().Draw(t, "id")
		seed := rapid.Uint64().Draw(t, "seed")
		boundMs := rapid.IntRange(0, 10000).Draw(t, "bound_ms")
		i := rapid.IntRange(-1, 1<<20).Draw(t, "i")
		got := latency.Jitter(seed, id, "decode-", i, time.Duration(boundMs)*time.Millisecond)
		if got < 0 || got > time.Duration(boundMs)*time.Millisecond || got%time.Millisecond != 0 {
			t.Fatalf("jitter %v outside [0, %d ms] or not whole ms", got, boundMs)
		}
	})
}

func TestLegacyDelays(t *testing.T) {
	t.Parallel()
	m := latency.Legacy{
		TTFT: 50 * time.Millisecond, TTFTJitter: 10 * time.Millisecond,
		TokenDelay: 20 * time.Millisecond, DecodeJitter: 5 * time.Millisecond,
		PrefillTokensPerSecond: 1000,
	}
	if got, want := m.Prefill(250), 250*time.Millisecond; got != want {
		t.Errorf("Prefill(250) = %v, want %v", got, want)
	}
	if got, want := m.FirstToken("abc"), 50*time.Millisecond+latency.Jitter(0, "abc", "ttft", -1, 10*time.Millisecond); got != want {
		t.Errorf("FirstToken = %v, want %v", got, want)
	}
	if got := m.TokenGap("abc", 0); got != 0 {
		t.Errorf("TokenGap(0) = %v, want 0", got)
	}
	total := m.Prefill(100) + m.FirstToken("abc") + m.TokenGap("abc", 1) + m.TokenGap("abc", 2)
	if got := m.Total("abc", 100, 3); got != total {
		t.Errorf("Total = %v, want %v", got, total)
	}
	half := m
	half.TimeScale = 0.5
	if got, want := half.Total("abc", 100, 3), total/2; got != want {
		t.Errorf("scaled Total = %v, want %v", got, want)
	}
	if got := (latency.Legacy{PrefillTokensPerSecond: 0}).Prefill(1000); got != 0 {
		t.Errorf("rate 0 gave prefill %v", got)
	}
	seeded := m
	seeded.Seed = 7
	differs := false
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		differs = differs || seeded.FirstToken(id) != m.FirstToken(id)
	}
	if !differs {
		t.Error("a non-zero seed never changed the jitter")
	}
}

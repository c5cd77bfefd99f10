package latency

import (
	"math"
	"time"
)

// Legacy is the reference mock engine's per-request timing model: a prefill delay
// proportional to the uncached input tokens, a fixed time to first token plus a
// deterministic jitter, and a fixed delay plus a deterministic jitter before every later
// token. Every delay is multiplied by TimeScale.
//
// The zero value is a model with no delays at all.
type Legacy struct {
	// TTFT is the fixed delay between the end of prefill and the first token.
	TTFT time.Duration
	// TTFTJitter bounds the extra deterministic delay added to TTFT (millisecond resolution).
	TTFTJitter time.Duration
	// TokenDelay is the fixed delay before every token after the first.
	TokenDelay time.Duration
	// DecodeJitter bounds the extra deterministic delay added to each TokenDelay
	// (millisecond resolution).
	DecodeJitter time.Duration
	// PrefillTokensPerSecond is the prefill rate; zero, negative or NaN means no prefill delay.
	PrefillTokensPerSecond float64
	// TimeScale multiplies every delay; zero means 1.
	TimeScale float64
	// Seed is mixed into the jitter hash when non-zero; zero reproduces the reference mock.
	Seed uint64
}

// Prefill returns the delay spent computing uncached input tokens.
func (m Legacy) Prefill(uncachedTokens uint64) time.Duration {
	rate := m.PrefillTokensPerSecond
	if !(rate > 0) || math.IsInf(rate, 1) || uncachedTokens == 0 {
		return 0
	}
	return m.scale(time.Duration(float64(uncachedTokens) / rate * float64(time.Second)))
}

// FirstToken returns the delay between the end of prefill and the first output token of
// the request: TTFT plus jitter(requestID, "ttft").
func (m Legacy) FirstToken(requestID string) time.Duration {
	return m.scale(m.TTFT + Jitter(m.Seed, requestID, "ttft", -1, m.TTFTJitter))
}

// TokenGap returns the delay before output token i (i ≥ 1) of the request:
// TokenDelay plus jitter(requestID, "decode-i"). It returns 0 for i ≤ 0.
func (m Legacy) TokenGap(requestID string, i int) time.Duration {
	if i <= 0 {
		return 0
	}
	return m.scale(m.TokenDelay + Jitter(m.Seed, requestID, "decode-", i, m.DecodeJitter))
}

// Total returns the time from admission to the last of outputTokens tokens.
func (m Legacy) Total(requestID string, uncachedTokens uint64, outputTokens int) time.Duration {
	d := m.Prefill(uncachedTokens)
	if outputTokens <= 0 {
		return d
	}
	d += m.FirstToken(requestID)
	for i := 1; i < outputTokens; i++ {
		d += m.TokenGap(requestID, i)
	}
	return d
}

func (m Legacy) scale(d time.Duration) time.Duration {
	return Scale(d, m.TimeScale)
}

// Scale multiplies d by factor; a zero, negative or NaN factor counts as 1.
func Scale(d time.Duration, factor float64) time.Duration {
	if !(factor > 0) || factor == 1 {
		return d
	}
	return time.Duration(float64(d) * factor)
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// Jitter returns a deterministic delay in [0, bound] with millisecond resolution: the
// FNV-1a 64 hash of (seed bytes when seed ≠ 0) ‖ requestID ‖ salt ‖ (decimal index when
// index ≥ 0), modulo bound-in-ms + 1, in milliseconds. With seed 0 it matches the
// reference mock's jitter(request id, salt).
func Jitter(seed uint64, requestID, salt string, index int, bound time.Duration) time.Duration {
	ms := bound.Milliseconds()
	if ms <= 0 {
		return 0
	}
	boundMs := uint64(ms)
	h := uint64(fnvOffset64)
	if seed != 0 {
		for i := range 8 {
			h ^= (seed >> (8 * i)) & 0xff
			h *= fnvPrime64
		}
	}
	for i := 0; i < len(requestID); i++ {
		h ^= uint64(requestID[i])
		h *= fnvPrime64
	}
	for i := 0; i < len(salt); i++ {
		h ^= uint64(salt[i])
		h *= fnvPrime64
	}
	if index >= 0 {
		var digits [20]byte
		n := len(digits)
		v := uint64(index)
		for {
			n--
			digits[n] = byte('0' + v%10)
			v /= 10
			if v == 0 {
				break
			}
		}
		for _, c := range digits[n:] {
			h ^= uint64(c)
			h *= fnvPrime64
		}
	}
	return time.Duration(h%(boundMs+1)) * time.Millisecond //nolint:gosec // the remainder is at most boundMs, which came from an int64
}

package mock_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/latency"
	"github.com/switchyard/switchyard/engines/mock"
)

// Validate gives one precise message per bad field, each an ErrConfig.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  mock.Config
		want []string
	}{
		{"zero is valid", mock.Config{}, nil},
		{"CLI-like is valid", mock.Config{ModelNames: []string{"a", "b"}, NumTokens: 10, TokenDelay: 100 * time.Millisecond, EngineModel: mock.ModelBatched, TimeScale: 0.5, ReadBufferBytes: 256, WriteBufferBytes: 8192}, nil},
		{"empty model name", mock.Config{ModelNames: []string{"a", ""}}, []string{"model name must not be empty"}},
		{"repeated model name", mock.Config{ModelNames: []string{"a", "b", "a"}}, []string{`model name "a" repeated`}},
		{"num tokens", mock.Config{NumTokens: -1}, []string{"num-tokens is -1, want ≥ 0"}},
		{"token delay", mock.Config{TokenDelay: -time.Millisecond}, []string{"token-delay is -1ms, want ≥ 0"}},
		{"decode jitter", mock.Config{DecodeJitter: -time.Second}, []string{"decode-jitter is -1s, want ≥ 0"}},
		{"ttft", mock.Config{TTFT: -1}, []string{"ttft is -1ns, want ≥ 0"}},
		{"ttft jitter", mock.Config{TTFTJitter: -2 * time.Millisecond}, []string{"ttft-jitter is -2ms, want ≥ 0"}},
		{"health delay", mock.Config{HealthDelay: -time.Minute}, []string{"health-delay is -1m0s, want ≥ 0"}},
		{"prefill negative", mock.Config{PrefillTokensPerSecond: -1}, []string{"prefill-tokens-per-s is -1, want a finite value ≥ 0"}},
		{"prefill NaN", mock.Config{PrefillTokensPerSecond: math.NaN()}, []string{"prefill-tokens-per-s is NaN, want a finite value ≥ 0"}},
		{"prefill infinite", mock.Config{PrefillTokensPerSecond: math.Inf(1)}, []string{"prefill-tokens-per-s is +Inf, want a finite value ≥ 0"}},
		{"max concurrent requests", mock.Config{MaxConcurrentRequests: -5}, []string{"max-concurrent-requests is -5, want ≥ 0"}},
		{"engine model", mock.Config{EngineModel: "vllm"}, []string{`engine-model is "vllm", want legacy or batched`}},
		{"time scale", mock.Config{TimeScale: -0.5}, []string{"time-scale is -0.5, want a finite value ≥ 0"}},
		{"max request body", mock.Config{MaxRequestBodyBytes: -1}, []string{"max-request-body-bytes is -1, want ≥ 0"}},
		{"read buffer", mock.Config{ReadBufferBytes: 255}, []string{"read-buffer-bytes is 255, want 0 (default) or ≥ 256"}},
		{"write buffer", mock.Config{WriteBufferBytes: -1}, []string{"write-buffer-bytes is -1, want 0 (default) or ≥ 256"}},
		{"batched fields, one line each", mock.Config{Batched: latency.BatchedConfig{Workers: -1, StepFixed: -time.Millisecond}}, []string{
			"invalid batched model config: workers is -1, want ≥ 0",
			"invalid batched model config: step_fixed is -1ms, want ≥ 0",
		}},
		{"every bad field reported", mock.Config{NumTokens: -1, TTFT: -1, EngineModel: "x", WriteBufferBytes: 1}, []string{
			"num-tokens is -1, want ≥ 0",
			"ttft is -1ns, want ≥ 0",
			`engine-model is "x", want legacy or batched`,
			"write-buffer-bytes is 1, want 0 (default) or ≥ 256",
		}},
	} {
		err := tc.cfg.Validate()
		var got []string
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				msg, ok := strings.CutPrefix(line, mock.ErrConfig.Error()+": ")
				if !ok {
					t.Errorf("%s: line %q lacks the %q prefix", tc.name, line, mock.ErrConfig)
				}
				got = append(got, msg)
			}
			if !errors.Is(err, mock.ErrConfig) {
				t.Errorf("%s: %v is not an ErrConfig", tc.name, err)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: messages (-want +got):\n%s", tc.name, diff)
		}
	}
}

// New refuses a bad config with the same error.
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := mock.New(mock.Config{NumTokens: -1}, mock.Deps{}); !errors.Is(err, mock.ErrConfig) {
		t.Fatalf("New with num-tokens -1: %v, want ErrConfig", err)
	}
}

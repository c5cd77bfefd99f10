package retry_test

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/gateway/retry"
	"github.com/switchyard/switchyard/internal/wire"
)

func TestDecide(t *testing.T) {
	t0 := time.Unix(1000, 0)
	policy := retry.Policy{MaxConnectRetries: 2, MaxRequestRetries: 1, RequireSignal: true}
	lenient := retry.Policy{MaxConnectRetries: 2, MaxRequestRetries: 1}
	fresh := retry.State{}
	budget := retry.State{Deadline: t0.Add(time.Second)}
	connectUsed := retry.State{ConnectRetries: 2, Failures: 2}
	requestUsed := retry.State{RequestRetries: 1, Failures: 1}
	response := func(status int, retryable, reason string) retry.Outcome {
		o := retry.Outcome{Kind: retry.Response, At: t0, Status: status}
		if retryable != "-" {
			o.Retryable = []byte(retryable)
		}
		if reason != "" {
			o.RetryReason = []byte(reason)
		}
		return o
	}
	next := func(s retry.State, connect, request, failures int) retry.State {
		s.ConnectRetries += connect
		s.RequestRetries += request
		s.Failures += failures
		return s
	}
	for _, tc := range []struct {
		name   string
		policy retry.Policy
		state  retry.State
		out    retry.Outcome
		want   retry.Decision
	}{
		{
			name: "backend gone: routed again without it, no retry used", policy: policy, state: connectUsed,
			out:  retry.Outcome{Kind: retry.BackendGone},
			want: retry.Decision{Retry: true, Next: next(connectUsed, 0, 0, 1), Release: true, Failed: true},
		},
		{
			name: "transport failure: a sibling of the cluster first", policy: policy, state: fresh,
			out: retry.Outcome{Kind: retry.TransportFailure, At: t0},
			want: retry.Decision{
				Retry: true, Next: next(fresh, 1, 0, 1), Release: true, Failed: true, PreferCluster: true,
				Reason: retry.ReasonConnectFailover,
			},
		},
		{
			name: "first-byte timeout: a connect retry of its own name", policy: policy, state: budget,
			out: retry.Outcome{Kind: retry.FirstByteTimeout, At: t0},
			want: retry.Decision{
				Retry: true, Next: next(budget, 1, 0, 1), Release: true, Failed: true, PreferCluster: true,
				Reason: retry.ReasonFirstByteTimeout,
			},
		},
		{
			name: "abandoned (pylon unresponsive): a connect retry of its own name", policy: policy, state: budget,
			out: retry.Outcome{Kind: retry.Abandoned, At: t0},
			want: retry.Decision{
				Retry: true, Next: next(budget, 1, 0, 1), Release: true, Failed: true, PreferCluster: true,
				Reason: retry.ReasonPylonUnresponsive,
			},
		},
		{
			name: "transport failure, connect retries used up: 502", policy: policy, state: connectUsed,
			out: retry.Outcome{Kind: retry.TransportFailure, At: t0},
			want: retry.Decision{
				Answer: retry.AnswerUpstreamError, Next: next(connectUsed, 0, 0, 1), Release: true, Failed: true,
				Reason: retry.ReasonConnectRetriesExhaust, Exhausted: true,
			},
		},
		{
			name: "transport failure, no connect retries configured: 502", policy: retry.Policy{}, state: fresh,
			out: retry.Outcome{Kind: retry.TransportFailure, At: t0},
			want: retry.Decision{
				Answer: retry.AnswerUpstreamError, Next: next(fresh, 0, 0, 1), Release: true, Failed: true,
				Reason: retry.ReasonConnectRetriesExhaust, Exhausted: true,
			},
		},
		{
			name: "transport failure at the budget's end: the budget is named first", policy: policy,
			state: retry.State{ConnectRetries: 2, Deadline: t0},
			out:   retry.Outcome{Kind: retry.FirstByteTimeout, At: t0},
			want: retry.Decision{
				Answer: retry.AnswerUpstreamError, Next: retry.State{ConnectRetries: 2, Deadline: t0, Failures: 1},
				Release: true, Failed: true, Reason: retry.ReasonBudgetExhausted, Exhausted: true,
			},
		},
		{
			name: "body too large: never retried", policy: policy, state: fresh,
			out:  retry.Outcome{Kind: retry.BodyTooLarge, At: t0},
			want: retry.Decision{Answer: retry.AnswerUpstreamError, Next: next(fresh, 0, 0, 1), Release: true, Failed: true},
		},
		{
			name: "200: the answer", policy: policy, state: fresh,
			out:  response(200, "true", "queue_estimate_mismatch"),
			want: retry.Decision{Answer: retry.AnswerResponse, Next: fresh},
		},
		{
			name: "500 marked retryable: still the answer (only 429 and 503 are retried)", policy: policy, state: fresh,
			out:  response(500, "true", ""),
			want: retry.Decision{Answer: retry.AnswerResponse, Next: fresh},
		},
		{
			name: "429 queue_estimate_mismatch: released, a sibling of the cluster first, the last retry unchecked", policy: policy, state: fresh,
			out: response(429, "true", wire.RetryQueueEstimateMismatch),
			want: retry.Decision{
				Retry: true, Next: next(fresh, 0, 1, 1), Release: true, Failed: true, PreferCluster: true, Retryable: true,
				Reason: wire.RetryQueueEstimateMismatch, Unchecked: true,
			},
		},
		{
			name: "503 marked TRUE (any case), no reason: the cluster excluded", policy: policy, state: fresh,
			out: response(503, "TRUE", ""),
			want: retry.Decision{
				Retry: true, Next: next(fresh, 0, 1, 1), Failed: true, ExcludeCluster: true, Retryable: true,
				Reason: wire.RetryDefaultRetryableResponse,
			},
		},
		{
			name: "503 without the signal when it is required: the answer", policy: policy, state: fresh,
			out:  response(503, "-", wire.RetryUpstreamAdmission),
			want: retry.Decision{Answer: retry.AnswerResponse, Next: fresh},
		},
		{
			name: "503 without the signal when it is not required: retried", policy: lenient, state: fresh,
			out: response(503, "-", wire.RetryUpstreamAdmission),
			want: retry.Decision{
				Retry: true, Next: next(fresh, 0, 1, 1), Failed: true, ExcludeCluster: true, Retryable: true,
				Reason: wire.RetryUpstreamAdmission,
			},
		},
		{
			name: "503 marked false: the answer, even when the signal is not required", policy: lenient, state: fresh,
			out:  response(503, "false", ""),
			want: retry.Decision{Answer: retry.AnswerResponse, Next: fresh},
		},
		{
			name: "engine unreachable: a connect retry, released, a sibling first", policy: policy, state: requestUsed,
			out: response(503, "true", wire.RetryLocalConnectFailure),
			want: retry.Decision{
				Retry: true, Next: next(requestUsed, 1, 0, 1), Release: true, Failed: true, PreferCluster: true,
				Retryable: true, BackendDown: true, Reason: retry.ReasonEngineUnreachable,
			},
		},
		{
			name: "engine unreachable, connect retries used up: passed through, still released", policy: policy, state: connectUsed,
			out: response(503, "true", wire.RetryLocalConnectFailure),
			want: retry.Decision{
				Answer: retry.AnswerResponse, Next: connectUsed, Release: true, Retryable: true, BackendDown: true,
				Reason: retry.ReasonConnectRetriesExhaust, Exhausted: true,
			},
		},
		{
			name: "request retries used up: passed through, given up under the pylon's reason", policy: policy, state: requestUsed,
			out: response(429, "true", wire.RetryUpstreamAdmission),
			want: retry.Decision{
				Answer: retry.AnswerResponse, Next: requestUsed, Retryable: true,
				Reason: wire.RetryUpstreamAdmission, Exhausted: true,
			},
		},
		{
			name: "mismatch past the budget: passed through, released", policy: policy, state: retry.State{Deadline: t0.Add(-time.Millisecond)},
			out: response(429, "true", wire.RetryQueueEstimateMismatch),
			want: retry.Decision{
				Answer: retry.AnswerResponse, Next: retry.State{Deadline: t0.Add(-time.Millisecond)}, Release: true, Retryable: true,
				Reason: retry.ReasonBudgetExhausted, Exhausted: true,
			},
		},
		{
			name: "rejected on a first attempt: the rejection", policy: policy, state: fresh,
			out:  retry.Outcome{Kind: retry.Rejected},
			want: retry.Decision{Answer: retry.AnswerRejection, Next: fresh},
		},
		{
			name: "rejected after a failed attempt: given up, no backend left", policy: policy, state: requestUsed,
			out:  retry.Outcome{Kind: retry.Rejected},
			want: retry.Decision{Answer: retry.AnswerRejection, Next: requestUsed, Reason: retry.ReasonNoEligibleBackend, Exhausted: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.policy.Decide(tc.state, tc.out); got != tc.want {
				t.Errorf("Decide(%+v, %+v)\n got %+v\nwant %+v", tc.state, tc.out, got, tc.want)
			}
		})
	}
}

// Only the last request retry after a queue refusal goes unchecked (no expected queue,
// so no pylon refuses it for its queue); other reasons' retries never do.
func TestLastQueueRetryUnchecked(t *testing.T) {
	p := retry.Policy{MaxConnectRetries: 2, MaxRequestRetries: 3}
	for _, reason := range []string{wire.RetryQueueEstimateMismatch, wire.RetryUpstreamAdmission} {
		var s retry.State
		var unchecked []bool
		for range 5 {
			d := p.Decide(s, retry.Outcome{Kind: retry.Response, Status: 429, Retryable: []byte("true"), RetryReason: []byte(reason)})
			if !d.Retry {
				break
			}
			unchecked = append(unchecked, d.Unchecked)
			s = d.Next
		}
		want := []bool{false, false, reason == wire.RetryQueueEstimateMismatch}
		if !slices.Equal(unchecked, want) {
			t.Errorf("%s: unchecked %v, want %v", reason, unchecked, want)
		}
	}
}

// Retries of each kind stop at their own limit, whatever the other kind used.
func TestLimitsAreCountedPerKind(t *testing.T) {
	p := retry.Policy{MaxConnectRetries: 2, MaxRequestRetries: 3}
	var s retry.State
	connect, request := 0, 0
	for range 10 {
		d := p.Decide(s, retry.Outcome{Kind: retry.TransportFailure})
		if !d.Retry {
			break
		}
		connect++
		s = d.Next
	}
	for range 10 {
		d := p.Decide(s, retry.Outcome{Kind: retry.Response, Status: 429, Retryable: []byte("true")})
		if !d.Retry {
			break
		}
		request++
		s = d.Next
	}
	if connect != 2 || request != 3 || s.Failures != 5 {
		t.Errorf("%d connect and %d request retries, %d failures; want 2, 3 and 5", connect, request, s.Failures)
	}
}

// Decide does not keep the header values it is given (the proxy passes views of the
// response's buffers, reused after the attempt).
func TestReasonDoesNotAliasTheResponse(t *testing.T) {
	reason := []byte("model_generation_unavailable")
	d := retry.Policy{MaxRequestRetries: 1}.Decide(retry.State{}, retry.Outcome{Kind: retry.Response, Status: 503, RetryReason: reason})
	copy(reason, "xxxxxxxxxxxxxxxxxxxxxxxxxxxx")
	if d.Reason != wire.RetryModelGenerationUnavail {
		t.Errorf("reason %q, want %q", d.Reason, wire.RetryModelGenerationUnavail)
	}
}

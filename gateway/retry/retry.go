// Package retry is the gateway's retry policy, as a pure function: after each attempt of
// a request, Policy.Decide says whether to route the request again and how, or that it is
// over and what the client gets. The proxy (gateway/proxy.go) does the I/O and follows the
// decision; this package does no I/O, reads no clock and logs nothing.
//
// The policy, per outcome of an attempt:
//
//   - The granted backend left the fleet before the attempt: nothing was sent. Route again
//     without that backend, at once; no retry is used and no budget is checked (each such
//     attempt excludes one more backend, so the scheduler ends it).
//   - A transport failure (connection refused or reset, closed before an answer) or the
//     first-byte deadline passing: a connect retry. The reservation of the attempt is
//     released (the work never started), the backend is excluded for this request, and the
//     next attempt tries a sibling backend of the same cluster first (the cluster is fine,
//     the backend is not). Counted as connect_failover or first_byte_timeout. Given up:
//     502 upstream_error.
//   - A response body larger than the gateway buffers: the backend answered, another
//     attempt would only repeat the work. Never retried: 502 upstream_error naming the limit.
//   - A 429 or 503 the pylon marks retryable (x-stargate-retryable: true; a missing header
//     counts as true unless the pylon's signal is required). Its reason is
//     x-stargate-retry-reason, else retryable_upstream_response:
//   - local_connect_failure (the pylon cannot reach its engine): handled like a transport
//     failure: a connect retry, reservation released, a sibling of the same cluster
//     first, the backend counted as failed by passive health; counted as
//     engine_unreachable.
//   - queue_estimate_mismatch (the pylon's queue is longer than the gateway estimated, or
//     it has no free slot for a request expected to queue 0 ms): a request retry,
//     reservation released, a sibling of the same cluster first. The last request retry
//     it allows goes without an expected queue (Decision.Unchecked), so no pylon refuses
//     it for its queue: a request is not failed over an estimate.
//   - any other reason: a request retry with the whole cluster excluded (its reservation
//     stays until the pylon's load report covers it); counted under the reason.
//     Given up, the pylon's response is passed through to the client as it is.
//   - Any other response is the answer, passed through.
//   - The scheduler rejects the request: its rejection is the answer; when an attempt had
//     failed before, the request counts as given up (no_eligible_backend).
//
// "A sibling first" is the scheduler's: it takes a sibling of the cluster before running
// the balancer, unless it knows the cluster to be full, by its latest report or the
// sibling's (then the cluster is left out).
//
// A retry is given up, checked in this order, when the retry budget has run out (the
// x-stargate-max-wait-ms header, from arrival: retry_budget_exhausted), or when its kind's
// counter is at its limit (Policy.MaxConnectRetries: connect_retries_exhausted;
// Policy.MaxRequestRetries: counted under the response's retry reason). A pylon's
// x-stargate-retry-after-ms is not waited on: a retry goes to another backend at once (the
// gateway strips the header).
package retry

import (
	"bytes"
	"time"

	"github.com/switchyard/switchyard/internal/wire"
)

// Policy is the configured limits of the policy.
type Policy struct {
	// MaxConnectRetries and MaxRequestRetries bound the connect and request retries of one
	// request (0: none).
	MaxConnectRetries int
	MaxRequestRetries int
	// RequireSignal retries a 429 or 503 only when the pylon says it is retryable (without
	// it, a response without x-stargate-retryable is retryable too).
	RequireSignal bool
}

// State is one request's retry state before an attempt's outcome.
type State struct {
	// ConnectRetries and RequestRetries are the retries used so far.
	ConnectRetries int
	RequestRetries int
	// Failures counts the request's failed attempts so far.
	Failures int
	// Deadline is the end of the request's retry budget (zero: no budget).
	Deadline time.Time
}

// Kind is what became of an attempt.
type Kind uint8

// Kinds of outcome.
const (
	// BackendGone: the granted backend left the fleet before the attempt was sent.
	BackendGone Kind = iota + 1
	// TransportFailure: no answer (connection refused, reset or closed before answering).
	TransportFailure
	// FirstByteTimeout: no answer before the attempt's first-byte deadline.
	FirstByteTimeout
	// Abandoned: no answer yet when the gateway gave up the backend's waiting requests,
	// because its pylon stopped answering health probes.
	Abandoned
	// BodyTooLarge: the answer's body exceeds what the gateway buffers.
	BodyTooLarge
	// Response: the pylon answered (Status, with its retry signal).
	Response
	// Rejected: the scheduler did not route the request (no attempt was made).
	Rejected
)

// Outcome is what became of an attempt.
type Outcome struct {
	Kind Kind
	// At is when the outcome was observed (checked against State.Deadline).
	At time.Time
	// Status, Retryable and RetryReason describe a Response: its status and the values of
	// its x-stargate-retryable and x-stargate-retry-reason headers (nil: absent). Decide
	// reads them only for a 429 or 503 and keeps no reference to them.
	Status      int
	Retryable   []byte
	RetryReason []byte
}

// Answer is what the client gets when the request is over.
type Answer uint8

// Answers.
const (
	// AnswerNone: the request is routed again (Decision.Retry).
	AnswerNone Answer = iota
	// AnswerResponse: the pylon's response, passed through.
	AnswerResponse
	// AnswerUpstreamError: 502 upstream_error (the transport error, or the body limit).
	AnswerUpstreamError
	// AnswerRejection: the scheduler's rejection.
	AnswerRejection
)

// Decision is what to do after an attempt.
type Decision struct {
	// Retry routes the request again; otherwise Answer is the client's answer.
	Retry  bool
	Answer Answer
	// Next is the request's state after this outcome (the retry counters).
	Next State
	// Release drops the attempt's routing reservation: the work never started.
	Release bool
	// Failed counts the attempt as failed and keeps its backend out of the request's
	// later attempts.
	Failed bool
	// PreferCluster asks the next attempt to try a sibling backend of the failed backend's
	// cluster first; ExcludeCluster keeps that cluster out of the next attempts.
	PreferCluster  bool
	ExcludeCluster bool
	// Retryable says the response was a retryable one (retried or given up): its backend
	// answered the gateway's protocol, and BackendDown says whether it is as good as down
	// (its engine unreachable), which passive health counts as a failure.
	Retryable   bool
	BackendDown bool
	// Reason names a retry (the reason label of proxy_retries_total) or, with Exhausted,
	// why the request was given up (proxy_retry_exhausted_total).
	Reason    string
	Exhausted bool
	// Unchecked sends the next attempt without an expected queue, so the pylon's queue
	// admission lets it in: it is the request's last request retry, after a refusal for
	// its queue (queue_estimate_mismatch). Routed to the best candidate once more, it may
	// wait at the engine rather than fail over an estimate.
	Unchecked bool
}

// Retry reasons of the gateway's own (the pylon's come from control).
const (
	ReasonConnectFailover       = "connect_failover"
	ReasonFirstByteTimeout      = "first_byte_timeout"
	ReasonPylonUnresponsive     = "pylon_unresponsive"
	ReasonEngineUnreachable     = "engine_unreachable"
	ReasonBudgetExhausted       = "retry_budget_exhausted"
	ReasonConnectRetriesExhaust = "connect_retries_exhausted"
	ReasonNoEligibleBackend     = "no_eligible_backend"
)

var retryableTrue = []byte("true")

// Decide returns what to do after outcome o of a request in state s (see the package
// documentation for the policy).
func (p Policy) Decide(s State, o Outcome) Decision {
	d := Decision{Next: s}
	switch o.Kind {
	case BackendGone:
		d.Retry, d.Release, d.Failed = true, true, true
	case TransportFailure, FirstByteTimeout, Abandoned:
		d.Release, d.Failed = true, true
		reason := ReasonConnectFailover
		switch o.Kind {
		case FirstByteTimeout:
			reason = ReasonFirstByteTimeout
		case Abandoned:
			reason = ReasonPylonUnresponsive
		default:
		}
		p.retry(&d, s, o, true, reason, ReasonConnectRetriesExhaust)
		if !d.Retry {
			d.Answer = AnswerUpstreamError
		}
	case BodyTooLarge:
		d.Release, d.Failed, d.Answer = true, true, AnswerUpstreamError
	case Response:
		reason, ok := p.retryable(&o)
		if !ok {
			d.Answer = AnswerResponse
			break
		}
		down := reason == wire.RetryLocalConnectFailure
		d.Retryable, d.BackendDown = true, down
		d.Release = down || reason == wire.RetryQueueEstimateMismatch
		if down {
			p.retry(&d, s, o, true, ReasonEngineUnreachable, ReasonConnectRetriesExhaust)
		} else {
			p.retry(&d, s, o, false, reason, reason)
		}
		if d.Retry {
			d.Failed = true
			d.PreferCluster, d.ExcludeCluster = d.Release, !d.Release
			d.Unchecked = reason == wire.RetryQueueEstimateMismatch && d.Next.RequestRetries >= p.MaxRequestRetries
		} else {
			d.Answer = AnswerResponse
		}
	case Rejected:
		d.Answer = AnswerRejection
		if s.Failures > 0 {
			d.Reason, d.Exhausted = ReasonNoEligibleBackend, true
		}
	default:
		d.Answer = AnswerResponse
	}
	if d.Failed {
		d.Next.Failures++
	}
	return d
}

// retry fills d for a retry of the connect (connect true) or request kind: retried as
// reason while the budget and the kind's counter allow, else given up as exhausted (or
// retry_budget_exhausted). A connect retry tries a sibling of the cluster first.
func (p Policy) retry(d *Decision, s State, o Outcome, connect bool, reason, exhausted string) {
	used, limit := s.RequestRetries, p.MaxRequestRetries
	if connect {
		used, limit = s.ConnectRetries, p.MaxConnectRetries
	}
	switch {
	case !s.Deadline.IsZero() && !o.At.Before(s.Deadline):
		d.Reason, d.Exhausted = ReasonBudgetExhausted, true
	case used >= limit:
		d.Reason, d.Exhausted = exhausted, true
	default:
		d.Retry, d.Reason = true, reason
		d.PreferCluster = connect
		if connect {
			d.Next.ConnectRetries++
		} else {
			d.Next.RequestRetries++
		}
	}
}

// retryable classifies a response: a 429 or 503 is retryable when it carries
// x-stargate-retryable: true (or no such header, unless the signal is required); its
// reason is x-stargate-retry-reason, else retryable_upstream_response.
func (p Policy) retryable(o *Outcome) (string, bool) {
	if o.Status != 429 && o.Status != 503 {
		return "", false
	}
	switch {
	case bytes.EqualFold(o.Retryable, retryableTrue):
	case o.Retryable == nil && !p.RequireSignal:
	default:
		return "", false
	}
	if len(o.RetryReason) > 0 {
		return string(o.RetryReason), true
	}
	return wire.RetryDefaultRetryableResponse, true
}

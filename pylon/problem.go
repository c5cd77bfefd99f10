package pylon

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/switchyard/switchyard/internal/echo"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/admission"
)

// problem is an application/problem+json answer the pylon itself produces. This file is
// the one place where pylon errors become HTTP status, headers and body.
type problem struct {
	Type         string  `json:"type"`
	Title        string  `json:"title"`
	Status       int     `json:"status"`
	Detail       string  `json:"detail"`
	Reason       string  `json:"reason,omitempty"`
	ExpectedMs   *uint64 `json:"expected_queue_ms,omitempty"`
	ActualMs     *uint64 `json:"actual_queue_ms,omitempty"`
	ThresholdMs  *uint64 `json:"threshold_ms,omitempty"`
	retryable    bool
	retryAfterMs uint64
}

func newProblem(status int, detail string) *problem {
	return &problem{Type: "about:blank", Title: fasthttp.StatusMessage(status), Status: status, Detail: detail}
}

// Problems.
func badHeader(name, why string) *problem {
	return newProblem(fasthttp.StatusBadRequest, "header "+name+" "+why)
}

func generationUnavailable(model string) *problem {
	p := newProblem(fasthttp.StatusServiceUnavailable, "model "+echo.Quote(model)+" has no admitted generation on this pylon")
	p.Reason, p.retryable = wire.RetryModelGenerationUnavail, true
	return p
}

// generationFailed answers the request whose admission hit a bug in its model's
// generation actor: the actor restarts at once with fresh state (generation_life.go), so
// the request may be retried, here or elsewhere.
func generationFailed(model string) *problem {
	p := newProblem(fasthttp.StatusServiceUnavailable, "the generation of model "+echo.Quote(model)+
		" failed on this request (an internal error) and restarts; retry the request")
	p.Reason, p.retryable = wire.RetryModelGenerationUnavail, true
	return p
}

func queueMismatch(d admission.Decision, retryAfterMs uint64) *problem {
	detail := "local queue estimate " + strconv.FormatUint(d.ActualMs, 10) +
		" ms exceeds the threshold " + strconv.FormatUint(d.ThresholdMs, 10) + " ms for the expected " + strconv.FormatUint(d.ExpectedMs, 10) + " ms"
	switch {
	case d.Share:
		detail = "no free slot in this pylon's share of the engine (" + strconv.FormatUint(d.Running, 10) + " of " +
			strconv.FormatUint(d.Concurrency, 10) + " taken by its requests) for a request expected to queue 0 ms"
	case d.NoFreeSlot:
		detail = "no free engine slot (" + strconv.FormatUint(d.Running, 10) + " of " + strconv.FormatUint(d.Concurrency, 10) +
			" running) for a request expected to queue 0 ms"
	}
	p := newProblem(fasthttp.StatusTooManyRequests, detail)
	p.Reason, p.retryable, p.retryAfterMs = wire.RetryQueueEstimateMismatch, true, retryAfterMs
	p.ExpectedMs, p.ActualMs, p.ThresholdMs = &d.ExpectedMs, &d.ActualMs, &d.ThresholdMs
	return p
}

func connectFailure(retryable bool) *problem {
	p := newProblem(fasthttp.StatusServiceUnavailable, "local upstream connection failed")
	p.Reason, p.retryable = wire.RetryLocalConnectFailure, retryable
	return p
}

// Reasons of the pylon's own problems (in the body; in x-stargate-retry-reason too when
// the problem is retryable).
const (
	reasonFirstOutputTimeout = "first_output_timeout"
	reasonInvalidBody        = "invalid_request_body"
	reasonStreamRequired     = "stream_required"
	reasonBodyTooLarge       = "request_body_too_large"
)

// upstreamFailure answers an engine call that failed before any response was relayed
// (a local upstream failure).
//   - A shutdown past its drain timeout aborted the call: 503, reason
//     local_connect_failure, retryable only with --local-connect-failures-retryable.
//   - The engine is unreachable: no connection to it could be made (the request never
//     reached it), or the connection closed before any response byte and engineDown (nil:
//     not asked) finds the engine does not answer either (it died, and the request with
//     it). 503, reason local_connect_failure, always retryable: the
//     gateway retries on another backend before anything reached its client, and counts
//     the failure against this backend's health.
//   - The first-output timeout (the engine sent nothing within --first-output-timeout):
//     504, reason first_output_timeout, retryable only with the flag: the engine is
//     working on the request.
//   - Anything else (the engine closed the connection but still accepts new ones): 503,
//     reason local_connect_failure, retryable only with the flag, since the engine may
//     have started the work.
func upstreamFailure(err error, shuttingDown, retryable bool, engineDown func() bool) *problem {
	var p *problem
	switch {
	case shuttingDown:
		p = newProblem(fasthttp.StatusServiceUnavailable, "the pylon shut down before the engine answered")
		p.Reason = wire.RetryLocalConnectFailure
	case errors.As(err, new(*relay.DialError)):
		return engineUnreachable()
	case errors.Is(err, relay.AbortError(relay.AbortUnanswered)):
		return engineUnresponsive() // abandoned by the liveness watch while it was sent
	case errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, new(relay.AbortError)):
		p = newProblem(fasthttp.StatusGatewayTimeout, "the engine sent no response within the first-output timeout")
		p.Reason = reasonFirstOutputTimeout
	case engineDown != nil && engineDown():
		return engineUnreachable()
	default:
		p = connectFailure(retryable)
	}
	p.retryable = retryable
	return p
}

// engineUnreachable answers a request whose engine cannot be reached: retryable on
// another backend whatever --local-connect-failures-retryable says.
func engineUnreachable() *problem {
	p := newProblem(fasthttp.StatusServiceUnavailable, "the inference engine is unreachable")
	p.Reason, p.retryable = wire.RetryLocalConnectFailure, true
	return p
}

// engineUnresponsive answers a request while the engine answers no liveness check
// (watchEngine), like an unreachable one: retryable on another backend.
func engineUnresponsive() *problem {
	p := engineUnreachable()
	p.Detail = "the inference engine accepts connections but answers nothing (no answer to its liveness checks)"
	return p
}

// invalidBody rejects an inference request body: not a JSON object, or a chat or responses
// body without "stream": true under RequireStreaming (400).
func invalidBody(detail string) *problem {
	p := newProblem(fasthttp.StatusBadRequest, detail)
	p.Reason = reasonInvalidBody
	return p
}

func streamRequired(path string) *problem {
	p := newProblem(fasthttp.StatusBadRequest, path+` requests must set "stream": true`)
	p.Reason = reasonStreamRequired
	return p
}

// unreadableRequest answers a request fasthttp could not read (the server's ErrorHandler):
// a body over the limit gets 413, headers over the read buffer 431, anything else 400.
// The details are fixed: fasthttp's errors quote pieces of the request, which must not
// be echoed back (the server's fasthttp logger reports parse errors at debug level).
func unreadableRequest(err error, maxBodyBytes int) *problem {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		p := newProblem(fasthttp.StatusRequestEntityTooLarge, "request body exceeds the limit of "+strconv.Itoa(maxBodyBytes)+" bytes")
		p.Reason = reasonBodyTooLarge
		return p
	case errors.As(err, &small):
		return newProblem(fasthttp.StatusRequestHeaderFieldsTooLarge, "request headers are too large")
	default:
		return newProblem(fasthttp.StatusBadRequest, "malformed HTTP request")
	}
}

func internalError() *problem {
	return newProblem(fasthttp.StatusInternalServerError, "internal error")
}

// write replaces the response with the problem.
func (p *problem) write(ctx *fasthttp.RequestCtx) {
	ctx.Response.Reset()
	ctx.SetStatusCode(p.Status)
	ctx.SetContentType("application/problem+json")
	if p.retryable {
		ctx.Response.Header.Set(wire.HeaderRetryable, "true")
	}
	if p.Reason != "" && p.retryable {
		ctx.Response.Header.Set(wire.HeaderRetryReason, p.Reason)
	}
	if p.retryAfterMs > 0 {
		ctx.Response.Header.Set(wire.HeaderRetryAfterMs, strconv.FormatUint(p.retryAfterMs, 10))
	}
	body, err := json.Marshal(p)
	if err != nil {
		body = []byte(`{"type":"about:blank","status":500}`)
	}
	ctx.SetBody(body)
}

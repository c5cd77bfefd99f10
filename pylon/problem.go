package pylon

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/control"
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
	p := newProblem(fasthttp.StatusServiceUnavailable, "model "+strconv.Quote(model)+" has no admitted generation on this pylon")
	p.Reason, p.retryable = control.RetryModelGenerationUnavail, true
	return p
}

func queueMismatch(d admission.Decision, retryAfterMs uint64) *problem {
	p := newProblem(fasthttp.StatusTooManyRequests, "local queue estimate "+strconv.FormatUint(d.ActualMs, 10)+
		" ms exceeds the threshold "+strconv.FormatUint(d.ThresholdMs, 10)+" ms for the expected "+strconv.FormatUint(d.ExpectedMs, 10)+" ms")
	p.Reason, p.retryable, p.retryAfterMs = control.RetryQueueEstimateMismatch, true, retryAfterMs
	p.ExpectedMs, p.ActualMs, p.ThresholdMs = &d.ExpectedMs, &d.ActualMs, &d.ThresholdMs
	return p
}

func connectFailure(retryable bool) *problem {
	p := newProblem(fasthttp.StatusServiceUnavailable, "local upstream connection failed")
	p.Reason, p.retryable = control.RetryLocalConnectFailure, retryable
	return p
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
		ctx.Response.Header.Set(control.HeaderRetryable, "true")
	}
	if p.Reason != "" && p.retryable {
		ctx.Response.Header.Set(control.HeaderRetryReason, p.Reason)
	}
	if p.retryAfterMs > 0 {
		ctx.Response.Header.Set(control.HeaderRetryAfterMs, strconv.FormatUint(p.retryAfterMs, 10))
	}
	body, err := json.Marshal(p)
	if err != nil {
		body = []byte(`{"type":"about:blank","status":500}`)
	}
	ctx.SetBody(body)
}

package gateway

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/control"
)

// Error classes of the front end; errors.Is matches them.
var (
	ErrBadRequest    = errors.New("bad request")
	ErrTooLarge      = errors.New("request body too large")
	ErrUnauthorized  = errors.New("unauthorized")
	ErrConflict      = errors.New("conflict")
	ErrNotFound      = errors.New("not found")
	ErrMethod        = errors.New("method not allowed")
	ErrShuttingDown  = errors.New("shutting down")
	ErrUpstreamError = errors.New("upstream transport error")
)

// httpError is an error with its HTTP mapping.
type httpError struct {
	status int
	code   string // error.code and, for routing failures, x-stargate-error-code
	kind   string // error.type
	msg    string
	header bool // set x-stargate-error-code
	// retryAfter sets Retry-After (seconds) on an answer that sheds load.
	retryAfter int
}

func (e *httpError) Error() string { return e.msg }

// errorFor maps an error class to status, OpenAI error type and code. It is the one place
// that turns front-end errors into HTTP responses.
func errorFor(err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	msg := err.Error()
	switch {
	case errors.Is(err, ErrBadRequest):
		return &httpError{status: 400, kind: "invalid_request_error", code: "invalid_request", msg: msg}
	case errors.Is(err, ErrTooLarge):
		return &httpError{status: 413, kind: "invalid_request_error", code: "request_too_large", msg: msg}
	case errors.Is(err, ErrUnauthorized):
		return &httpError{status: 401, kind: "authentication_error", code: "unauthorized", msg: msg}
	case errors.Is(err, ErrConflict):
		return &httpError{status: 409, kind: "invalid_request_error", code: "registration_conflict", msg: msg}
	case errors.Is(err, ErrNotFound):
		return &httpError{status: 404, kind: "invalid_request_error", code: "not_found", msg: msg}
	case errors.Is(err, ErrMethod):
		return &httpError{status: 405, kind: "invalid_request_error", code: "method_not_allowed", msg: msg}
	case errors.Is(err, ErrShuttingDown):
		return &httpError{status: 503, kind: "server_error", code: "shutting_down", msg: msg}
	case errors.Is(err, ErrUpstreamError):
		return &httpError{status: 502, kind: "server_error", code: "upstream_error", msg: msg}
	default:
		return &httpError{status: 500, kind: "server_error", code: "internal_error", msg: "internal error"}
	}
}

// routingError is the error of a routing outcome (404 no_eligible_candidates, 503 …).
func routingError(status int, code string) *httpError {
	msg := "no eligible backend"
	switch code {
	case "no_eligible_candidates":
		msg = "no eligible candidates"
	case "input_work_limit_exceeded":
		msg = "input work admission limit exceeded"
	case "overloaded_error":
		msg = "every eligible backend is at capacity"
	case "shutting_down":
		msg = "gateway is shutting down"
	default:
	}
	he := &httpError{status: status, kind: "server_error", code: code, msg: msg, header: true}
	if status == 503 && (code == "overloaded_error" || code == "input_work_limit_exceeded") {
		he.retryAfter = shedRetryAfterSeconds
	}
	return he
}

// shedRetryAfterSeconds is the Retry-After of a request shed because the fleet is at
// capacity: a slot usually frees within a second under load.
const shedRetryAfterSeconds = 1

// writeError writes err as an OpenAI-style JSON error body.
func writeError(ctx *fasthttp.RequestCtx, err error) {
	he := errorFor(err)
	ctx.Response.Reset()
	ctx.SetStatusCode(he.status)
	ctx.SetContentType("application/json")
	if he.header {
		ctx.Response.Header.Set(control.HeaderErrorCode, he.code)
	}
	if he.retryAfter > 0 {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(he.retryAfter))
	}
	b, _ := json.Marshal(errorBody{Error: errorDetail{Message: he.msg, Type: he.kind, Code: he.code}})
	ctx.SetBody(b)
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

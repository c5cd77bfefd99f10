package mock

import (
	"errors"
	"strconv"

	"github.com/valyala/fasthttp"
)

// apiError is an error answered to the client as an OpenAI-style JSON body.
type apiError struct {
	Status  int
	Type    string
	Code    string
	Message string
	// RetryAfter, when positive, is sent as Retry-After (seconds).
	RetryAfter int
}

func (e *apiError) Error() string { return e.Message }

// Error types and codes (OpenAI's vocabulary).
const (
	typeInvalidRequest = "invalid_request_error"
	typeNotFound       = "not_found_error"
	typeServer         = "server_error"
	typeRateLimit      = "rate_limit_error"
	typeUnavailable    = "service_unavailable"
)

var (
	errEngineClosed = errors.New("engine is shutting down")
	// errBadHTTP wraps the errors of requests fasthttp could not read.
	errBadHTTP = errors.New("cannot parse the HTTP request")
)

func badRequest(code, msg string) *apiError {
	return &apiError{Status: fasthttp.StatusBadRequest, Type: typeInvalidRequest, Code: code, Message: msg}
}

// errorResponse is the one place that maps an error to a status and JSON body.
func errorResponse(err error) (status int, body []byte, retryAfter int) {
	var (
		ae    *apiError
		small *fasthttp.ErrSmallBuffer
	)
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, errEngineClosed):
		ae = &apiError{Status: fasthttp.StatusServiceUnavailable, Type: typeUnavailable, Code: "engine_shutting_down", Message: errEngineClosed.Error()}
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ae = &apiError{Status: fasthttp.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "request_too_large", Message: "request body too large"}
	case errors.As(err, &small):
		ae = &apiError{
			Status: fasthttp.StatusRequestHeaderFieldsTooLarge, Type: typeInvalidRequest, Code: "request_header_too_large",
			Message: "request headers larger than the read buffer (--read-buffer-bytes)",
		}
	case errors.Is(err, errBadHTTP):
		ae = badRequest("bad_request", errBadHTTP.Error())
	default:
		ae = &apiError{Status: fasthttp.StatusInternalServerError, Type: typeServer, Code: "internal_error", Message: "internal error"}
	}
	body = append(body, `{"error":{"message":`...)
	body = appendJSONString(body, ae.Message)
	body = append(body, `,"type":`...)
	body = appendJSONString(body, ae.Type)
	body = append(body, `,"param":null,"code":`...)
	body = appendJSONString(body, ae.Code)
	body = append(body, "}}"...)
	return ae.Status, body, ae.RetryAfter
}

func writeError(ctx *fasthttp.RequestCtx, err error) {
	status, body, retryAfter := errorResponse(err)
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	if retryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	ctx.SetBody(body)
}

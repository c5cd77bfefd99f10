package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/gateway/lbconfig"
	"github.com/switchyard/switchyard/internal/wire"
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
	// ErrUnknownBackend and ErrRegistrationRequired refuse a load update: the pylon
	// sends a full registration instead.
	ErrUnknownBackend       = fleet.ErrUnknownBackend
	ErrRegistrationRequired = fleet.ErrRegistrationRequired
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

// errorClasses is the error table of the front end: each error class's status, OpenAI
// error type and code (the message is the error's own text). docs/gateway.md lists it,
// and TestErrorTables keeps the two in step.
var errorClasses = []struct {
	class  error
	status int
	kind   string
	code   string
}{
	{ErrBadRequest, 400, "invalid_request_error", "invalid_request"},
	{ErrTooLarge, 413, "invalid_request_error", "request_too_large"},
	{ErrUnauthorized, 401, "authentication_error", "unauthorized"},
	{ErrConflict, 409, "invalid_request_error", "registration_conflict"},
	{ErrNotFound, 404, "invalid_request_error", "not_found"},
	{ErrMethod, 405, "invalid_request_error", "method_not_allowed"},
	{ErrShuttingDown, 503, "server_error", "shutting_down"},
	{ErrUpstreamError, 502, "server_error", "upstream_error"},
	{ErrUnknownBackend, 404, "invalid_request_error", "unknown_backend"},
	{ErrRegistrationRequired, 409, "invalid_request_error", "registration_required"},
}

// errorFor maps an error to its HTTP answer: an *httpError as it is (made from the
// rejections or expressionRefusals table, or errHeadersTooLarge), an error class by
// errorClasses, anything else as a 500 that does not show its text. With those tables
// this file is the one place that turns the gateway's errors into HTTP responses.
func errorFor(err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	for _, c := range errorClasses {
		if errors.Is(err, c.class) {
			return &httpError{status: c.status, kind: c.kind, code: c.code, msg: err.Error()}
		}
	}
	return &httpError{status: 500, kind: "server_error", code: "internal_error", msg: "internal error"}
}

// rejection is the HTTP answer to a request the scheduler (or the wait for it) did not
// route: every one carries x-stargate-error-code.
type rejection struct {
	status int
	code   string // error.code and x-stargate-error-code
	msg    string
	// retryAfter is the Retry-After in seconds (0: none): set where trying again soon is
	// expected to succeed.
	retryAfter int
	// admission also counts the rejection in admission_rejections_total (load shedding
	// rather than a missing backend).
	admission bool
	// legacyCode replaces code when the gateway runs with --legacy-input-work-error-code
	// ("": the flag changes nothing for this reason).
	legacyCode string
}

// rejections is the error table of routing: each dispatch.Reason's status, code, message
// and Retry-After (error.type is always server_error). docs/gateway.md lists it, and
// TestRejectionTable keeps the two in step. The reason's own name (dispatch.Reason.String)
// is the metric label; several reasons share a code.
var rejections = [dispatch.NumReasons]rejection{
	dispatch.ReasonNoCandidates:        {status: 404, code: "no_eligible_candidates", msg: "no eligible candidates"},
	dispatch.ReasonNoEligibleBackend:   {status: 503, code: "no_eligible_backend", msg: "no eligible backend"},
	dispatch.ReasonUnavailable:         {status: 503, code: "no_eligible_backend", msg: "no eligible backend"},
	dispatch.ReasonCapacityUnavailable: {status: 503, code: "overloaded_error", msg: "every eligible backend is at capacity", retryAfter: shedRetryAfterSeconds, admission: true},
	dispatch.ReasonInputWorkLimit:      {status: 503, code: "overloaded_error", msg: "input work admission limit exceeded", retryAfter: shedRetryAfterSeconds, admission: true, legacyCode: legacyInputWorkCode},
	dispatch.ReasonInputWorkCapacity:   {status: 503, code: "overloaded_error", msg: "input work admission limit exceeded", retryAfter: shedRetryAfterSeconds, admission: true, legacyCode: legacyInputWorkCode},
	dispatch.ReasonInvalidLBConfig:     {status: 500, code: "invalid_lb_config", msg: "no eligible backend"},
	dispatch.ReasonShuttingDown:        {status: 503, code: "shutting_down", msg: "gateway is shutting down"},
	dispatch.ReasonRoutingTimeout:      {status: 503, code: "routing_timeout", msg: "no eligible backend"},
	dispatch.ReasonSchedulerFailed:     {status: 503, code: "routing_failed", msg: "routing failed: the routing target's scheduler failed; retry the request", retryAfter: 1},
}

// rejectionOf returns r's row of the table (a reason without one is an internal error).
func rejectionOf(r dispatch.Reason) rejection {
	if r < dispatch.NumReasons && rejections[r].status != 0 {
		return rejections[r]
	}
	return rejection{status: 500, code: "internal_error", msg: "internal error"}
}

// legacyInputWorkCode is the error code older gateways gave input-work admission
// rejections (--legacy-input-work-error-code).
const legacyInputWorkCode = "input_work_limit_exceeded"

// routingError is the error answering a request rejected for r.
func routingError(r dispatch.Reason) *httpError { return rejectionAnswer(r, false) }

// rejectionError is the error answering a request the scheduler rejected for r, with the
// row's legacy code when the gateway runs with --legacy-input-work-error-code.
func (g *Gateway) rejectionError(r dispatch.Reason) *httpError {
	return rejectionAnswer(r, g.cfg.LegacyInputWorkErrorCode)
}

// rejectionAnswer is r's row of the rejections table as an error; legacy selects the
// row's legacy code where it has one.
func rejectionAnswer(r dispatch.Reason, legacy bool) *httpError {
	rj := rejectionOf(r)
	code := rj.code
	if legacy && rj.legacyCode != "" {
		code = rj.legacyCode
	}
	return &httpError{status: rj.status, kind: "server_error", code: code, msg: rj.msg, header: true, retryAfter: rj.retryAfter}
}

// expressionRefusal is the HTTP answer to a refused routing expression: every one is a
// client error before routing, carries x-stargate-error-code, and its message is the
// refusal's own (it names the parameter at fault).
type expressionRefusal struct {
	status int
	kind   string // error.type
	code   string // error.code and x-stargate-error-code
}

// expressionRefusals is the error table of routing expressions (x-routing-method with
// parameters): each lbconfig.ExpressionClass's answer. The code is the class's own name,
// which docs/routing.md explains. docs/gateway.md lists the table, and
// TestExpressionRefusalTable keeps the three in step.
var expressionRefusals = map[lbconfig.ExpressionClass]expressionRefusal{
	lbconfig.ExprMalformed:        {status: 400, kind: "invalid_request_error", code: "malformed_expression"},
	lbconfig.ExprUnknownMethod:    {status: 400, kind: "invalid_request_error", code: "unknown_method"},
	lbconfig.ExprUnavailable:      {status: 400, kind: "invalid_request_error", code: "unavailable"},
	lbconfig.ExprUnknownParameter: {status: 400, kind: "invalid_request_error", code: "unknown_parameter"},
	lbconfig.ExprNotApplicable:    {status: 400, kind: "invalid_request_error", code: "not_applicable"},
	lbconfig.ExprInvalidValue:     {status: 400, kind: "invalid_request_error", code: "invalid_value"},
	lbconfig.ExprInertValue:       {status: 400, kind: "invalid_request_error", code: "inert_value"},
	lbconfig.ExprInertCombination: {status: 400, kind: "invalid_request_error", code: "inert_combination"},
}

// The table answers every class of refused expressions: a class added without a row
// stops every binary that links the gateway at start-up, before it serves anything.
func init() {
	for _, c := range lbconfig.ExpressionClasses() {
		if _, ok := expressionRefusals[c]; !ok {
			panic("gateway: routing-expression class " + string(c) + " has no row in expressionRefusals")
		}
	}
}

// routingMethodError is the answer to a refused x-routing-method: a refused routing
// expression by its class's row of expressionRefusals, any other refusal (a plain method
// name that is unknown or not allowed) as ErrBadRequest. A class without a row (none: init
// and the table test see to it) is answered as ErrBadRequest too.
func routingMethodError(err error) error {
	var xe *lbconfig.ExpressionError
	if errors.As(err, &xe) {
		if rf, ok := expressionRefusals[xe.Class]; ok {
			return &httpError{status: rf.status, kind: rf.kind, code: rf.code, msg: xe.Error(), header: true}
		}
	}
	return fmt.Errorf("%w: invalid %s: %w", ErrBadRequest, wire.HeaderRoutingMethod, err)
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
		ctx.Response.Header.Set(wire.HeaderErrorCode, he.code)
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

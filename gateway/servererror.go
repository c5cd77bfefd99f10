package gateway

import (
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"
)

// errHeadersTooLarge answers requests whose headers do not fit the server's read buffer.
var errHeadersTooLarge = &httpError{
	status: fasthttp.StatusRequestHeaderFieldsTooLarge, kind: "invalid_request_error",
	code: "request_header_too_large", msg: "request headers are too large",
}

// serverError answers requests fasthttp rejects before the handler (oversize bodies and
// headers, malformed requests) with our JSON errors. The messages are fixed: fasthttp's
// errors quote pieces of the request, which must not be echoed back, so the detail goes
// to the debug log only. A refused inference request whose head was read (a body over the
// replay limit) is recorded like the handler's refusals: access log and request span.
func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	g.log.Debug("unreadable_request", "remote_addr", ctx.RemoteAddr().String(), "err", err)
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		err = fmt.Errorf("%w: the body exceeds the replay limit of %d bytes", ErrTooLarge, g.cfg.MaxReplayBodyBytes)
	case errors.As(err, &small):
		err = errHeadersTooLarge
	default:
		err = fmt.Errorf("%w: malformed HTTP request", ErrBadRequest)
	}
	writeError(ctx, err)
	if inferencePath(ctx.Path()) { // the public listener's; the admin listener has none
		g.refused(ctx, g.access.pick(), g.deps.Now(), nil, err)
	}
}

// inferencePath reports whether p is one of the OpenAI endpoints the gateway routes.
func inferencePath(p []byte) bool {
	switch string(p) {
	case "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings":
		return true
	default:
		return false
	}
}

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
// to the debug log only.
func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	g.log.Debug("unreadable_request", "remote_addr", ctx.RemoteAddr().String(), "err", err)
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		writeError(ctx, fmt.Errorf("%w: the body exceeds the replay limit of %d bytes", ErrTooLarge, g.cfg.MaxReplayBodyBytes))
	case errors.As(err, &small):
		writeError(ctx, errHeadersTooLarge)
	default:
		writeError(ctx, fmt.Errorf("%w: malformed HTTP request", ErrBadRequest))
	}
}

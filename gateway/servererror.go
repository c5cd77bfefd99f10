package gateway

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

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
	g.log.Debug("unreadable request", "remote_addr", ctx.RemoteAddr().String(), "err", err)
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

// maxEcho bounds the bytes of a client-sent value that an error message may quote.
const maxEcho = 64

// quoteClient quotes a client-sent value for an error message: at most maxEcho bytes (cut
// on a rune boundary, "..." marking the cut), Go-quoted so control characters and
// invalid UTF-8 show as escapes.
func quoteClient[T ~string | ~[]byte](v T) string {
	s := string(v[:min(len(v), maxEcho+1)])
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > maxEcho-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

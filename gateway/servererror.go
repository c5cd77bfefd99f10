package gateway

import (
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"
)

// serverError answers requests fasthttp rejects before the handler (oversize bodies,
// malformed requests) with our JSON errors.
func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, fmt.Errorf("%w: the body exceeds the replay limit of %d bytes", ErrTooLarge, g.cfg.MaxReplayBodyBytes))
		return
	}
	writeError(ctx, fmt.Errorf("%w: %w", ErrBadRequest, err))
}

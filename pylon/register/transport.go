package register

import (
	"bytes"
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/wire"
)

// Doer sends one request (a *fasthttp.Client: keep-alive connections per gateway).
type Doer interface {
	DoTimeout(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error
}

// HTTPTransport is the pylon's Transport: one request through c within DefaultSendTimeout,
// with "Authorization: Bearer" and the token that token returns, or, when it returns "",
// the registrar's own; a PATCH body goes as a load update (wire.LoadUpdateContentType),
// any other as JSON. The answer's body is copied.
func HTTPTransport(c Doer, token func() string) Transport {
	return func(_ context.Context, method, uri, cfgToken string, body []byte) (int, []byte, error) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(uri)
		req.Header.SetMethod(method)
		tok := cfgToken
		if token != nil {
			if t := token(); t != "" {
				tok = t
			}
		}
		if tok != "" {
			req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+tok)
		}
		if body != nil {
			if method == fasthttp.MethodPatch {
				req.Header.SetContentType(wire.LoadUpdateContentType)
			} else {
				req.Header.SetContentType("application/json")
			}
			req.SetBodyRaw(body)
		}
		if err := c.DoTimeout(req, resp, DefaultSendTimeout); err != nil {
			return 0, nil, err //nolint:wrapcheck // the client's own error, logged by the registrar
		}
		return resp.StatusCode(), bytes.Clone(resp.Body()), nil
	}
}

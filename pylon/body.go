package pylon

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/valyala/fasthttp"
)

// checkBody validates the body of a POST to an inference endpoint once, before admission:
// it must be a JSON object, and with RequireStreaming a chat or responses body must set
// "stream": true. fasthttp has already read the whole body (larger than
// MaxRequestBodyBytes: 413 from the server's ErrorHandler). It reports whether the response
// is to be streamed; other paths and methods pass unchecked.
func (p *Pylon) checkBody(ctx *fasthttp.RequestCtx) (stream bool, _ *problem) {
	body := ctx.Request.Body()
	stream = streamRequested(body)
	if ctx.IsPost() {
		switch path := ctx.Path(); string(path) {
		case "/v1/chat/completions", "/v1/responses":
			if pr := checkJSONObject(body); pr != nil {
				return false, pr
			}
			if p.cfg.RequireStreaming && !stream {
				return false, streamRequired(string(path))
			}
		case "/v1/completions", "/v1/embeddings":
			if pr := checkJSONObject(body); pr != nil {
				return false, pr
			}
		}
	}
	return stream || bytes.Contains(ctx.Request.Header.Peek("Accept"), []byte("text/event-stream")), nil
}

// checkJSONObject accepts a JSON object without allocating; only a rejection pays for a
// precise message.
func checkJSONObject(body []byte) *problem {
	if json.Valid(body) {
		if v := bytes.TrimLeft(body, " \t\r\n"); v[0] != '{' {
			return invalidBody("request body must be a JSON object")
		}
		return nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return invalidBody("request body is empty; a JSON object is required")
	}
	var raw json.RawMessage
	err := json.Unmarshal(body, &raw) // the same syntax check, now with the position
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return invalidBody("request body is not valid JSON: " + se.Error() + " at byte " + strconv.FormatInt(se.Offset, 10))
	}
	return invalidBody("request body is not valid JSON")
}

// streamRequested reports whether a request body sets "stream": true (a byte scan, no
// decoding: the first "stream" key decides).
func streamRequested(body []byte) bool {
	i := bytes.Index(body, []byte(`"stream"`))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(body[i+len(`"stream"`):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(rest[1:], " \t\r\n"), []byte("true"))
}

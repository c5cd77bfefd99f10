package mock

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"
)

// smallBufferError is the error fasthttp returns for headers larger than its read buffer.
func smallBufferError(t *testing.T) error {
	t.Helper()
	var h fasthttp.RequestHeader
	raw := "GET / HTTP/1.1\r\nHost: e\r\nX-Big: " + strings.Repeat("a", 256) + "\r\n\r\n"
	err := h.Read(bufio.NewReaderSize(strings.NewReader(raw), 64))
	var small *fasthttp.ErrSmallBuffer
	if !errors.As(err, &small) {
		t.Fatalf("reading oversize headers: %v, want *fasthttp.ErrSmallBuffer", err)
	}
	return err
}

// errorResponse maps each error class to its status, OpenAI type and code, with one body
// shape: {"error":{"message","type","param":null,"code"}}.
func TestErrorResponse(t *testing.T) {
	t.Parallel()
	injected := &apiError{Status: 429, Type: typeRateLimit, Code: "injected_failure", Message: "injected failure: Too Many Requests", RetryAfter: 7}
	for _, tc := range []struct {
		name           string
		err            error
		wantStatus     int
		wantType       string
		wantCode       string
		wantMessage    string
		wantRetryAfter int
	}{
		{"bad request", badRequest("invalid_json", "the request body is not valid JSON"), 400, typeInvalidRequest, "invalid_json", "the request body is not valid JSON", 0},
		{"wrapped api error", fmt.Errorf("parsing: %w", badRequest("invalid_type", `invalid type for 'a"b\c'`+"\n")), 400, typeInvalidRequest, "invalid_type", `invalid type for 'a"b\c'` + "\n", 0},
		{"not found", &apiError{Status: 404, Type: typeNotFound, Code: "model_not_found", Message: "the model 'x' does not exist"}, 404, typeNotFound, "model_not_found", "the model 'x' does not exist", 0},
		{"injected with retry-after", injected, 429, typeRateLimit, "injected_failure", "injected failure: Too Many Requests", 7},
		{"engine closed", fmt.Errorf("waiting: %w", errEngineClosed), 503, typeUnavailable, "engine_shutting_down", "engine is shutting down", 0},
		{"body too large", fasthttp.ErrBodyTooLarge, 413, typeInvalidRequest, "request_too_large", "request body too large", 0},
		{"unreadable: body too large", fmt.Errorf("%w: %w", errBadHTTP, fasthttp.ErrBodyTooLarge), 413, typeInvalidRequest, "request_too_large", "request body too large", 0},
		{"unreadable: headers too large", fmt.Errorf("%w: %w", errBadHTTP, smallBufferError(t)), 431, typeInvalidRequest, "request_header_too_large", "request headers larger than the read buffer (--read-buffer-bytes)", 0},
		{"unreadable: malformed", fmt.Errorf("%w: %w", errBadHTTP, errors.New("bad first line")), 400, typeInvalidRequest, "bad_request", "cannot parse the HTTP request", 0},
		{"anything else is a 500 that hides the detail", errors.New("secret detail"), 500, typeServer, "internal_error", "internal error", 0},
	} {
		status, body, retryAfter := errorResponse(tc.err)
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("%s: body %q is not JSON: %v", tc.name, body, err)
			continue
		}
		want := map[string]any{"error": map[string]any{"message": tc.wantMessage, "type": tc.wantType, "param": nil, "code": tc.wantCode}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: body (-want +got):\n%s", tc.name, diff)
		}
		if status != tc.wantStatus || retryAfter != tc.wantRetryAfter {
			t.Errorf("%s: status %d, retry-after %d; want %d, %d", tc.name, status, retryAfter, tc.wantStatus, tc.wantRetryAfter)
		}
	}
}

package mock_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/testkit/rawhttp"
)

// checkErrorBody asserts an OpenAI-style JSON error with the given status and code whose
// body does not contain rawhttp.Marker.
func checkErrorBody(t *testing.T, name string, resp *fasthttp.Response, status int, code string) {
	t.Helper()
	var body errBody
	if err := json.Unmarshal(resp.Body(), &body); err != nil || body.Error.Message == "" {
		t.Errorf("%s: body %.200q is not a JSON error: %v", name, resp.Body(), err)
	}
	if resp.StatusCode() != status || body.Error.Code != code || string(resp.Header.ContentType()) != "application/json" {
		t.Errorf("%s: %d %s code %q, want %d application/json code %q", name, resp.StatusCode(), resp.Header.ContentType(), body.Error.Code, status, code)
	}
	if strings.Contains(string(resp.Body()), rawhttp.Marker) {
		t.Errorf("%s: the body echoes the request: %.200q", name, resp.Body())
	}
}

// Requests fasthttp cannot read get fixed JSON errors: 431 for a 100 KB header, 413 for a
// body over the hard cap, 400 for a malformed request, and none echoes request bytes.
func TestUnreadableRequestsGetFixedJSONErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, mock.Config{MaxRequestBodyBytes: 4096})
		defer h.stop()
		for _, tc := range []struct {
			name, req string
			status    int
			code      string
		}{
			{"100 KB header", rawhttp.HugeHeader("e", "/health"), 431, "request_header_too_large"},
			{"100 KB request line", rawhttp.HugeRequestLine("e"), 431, "request_header_too_large"},
			{"request line without spaces", rawhttp.LineWithoutSpaces("e"), 400, "bad_request"},
			{"header line without a colon", rawhttp.HeaderWithoutColon("e", "/health"), 400, "bad_request"},
			{"content length not a number", rawhttp.BadContentLength("e", "/v1/chat/completions"), 400, "bad_request"},
			// Over the hard cap fasthttp refuses the body itself (below it the handler
			// answers 413, see TestBadInputIsAnsweredWithOpenAIErrors).
			{"body over the hard cap", "POST /v1/chat/completions HTTP/1.1\r\nHost: e\r\nContent-Length: 100000000\r\n\r\n{}", 413, "request_too_large"},
		} {
			checkErrorBody(t, tc.name, rawhttp.Send(t, h.ln.Dial, tc.req), tc.status, tc.code)
		}
	})
}

// Error messages quote client-chosen names (paths, models, control fields) cut to 64
// bytes: a long value never comes back whole.
func TestErrorsQuoteClientValuesShortly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, fastCfg)
		defer h.stop()
		long := strings.Repeat("x", 200) + rawhttp.Marker
		for _, tc := range []struct {
			name   string
			c      call
			status int
			code   string
			quoted string // what the message quotes
		}{
			{"unknown path", call{method: "GET", path: "/" + long}, 404, "not_found", `"/` + strings.Repeat("x", 63) + `"...`},
			{"unknown model", call{method: "POST", path: "/v1/chat/completions", body: `{"model":"` + long + `","messages":[{"role":"user","content":"x"}]}`}, 404, "model_not_found", `"` + strings.Repeat("x", 64) + `"...`},
			{"short unknown model", call{method: "POST", path: "/v1/chat/completions", body: `{"model":"gpt-9\n","messages":[{"role":"user","content":"x"}]}`}, 404, "model_not_found", `"gpt-9\n"`},
			{"control for an unknown model", call{method: "PUT", path: "/test-control/models/" + long, body: `{}`}, 404, "model_not_found", `"` + strings.Repeat("x", 64) + `"...`},
			{"unknown control field", call{method: "PUT", path: "/test-control/models/m", body: `{"` + long + `":1}`}, 400, "invalid_json", `"` + strings.Repeat("x", 64) + `"...`},
		} {
			resp := h.do(tc.c)
			checkErrorBody(t, tc.name, resp, tc.status, tc.code)
			var body errBody
			_ = json.Unmarshal(resp.Body(), &body)
			if !strings.Contains(body.Error.Message, tc.quoted) {
				t.Errorf("%s: message %q does not quote %s", tc.name, body.Error.Message, tc.quoted)
			}
		}
	})
}

// The fault-injection endpoints answer 404 like any unknown path unless
// EnableTestControl is set, and a refused PUT injects nothing.
func TestTestControlIsOffByDefault(t *testing.T) {
	calls := []call{
		{method: "GET", path: "/test-control"},
		{method: "PUT", path: "/test-control/models/m", body: `{"chat_failure":true}`},
		{method: "PUT", path: "/test-control/health", body: `{"delay_ms":1}`},
		{method: "PUT", path: "/test-control/discovery-models", body: `{"models":["x1"]}`},
	}
	chat := call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, "x")}
	for _, enabled := range []bool{false, true} {
		t.Run("enabled="+strconv.FormatBool(enabled), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := mock.Config{ModelNames: []string{"m"}, NumTokens: 1, EnableTestControl: enabled}
				h := start(t, cfg)
				defer h.stop()
				for _, c := range calls {
					resp := h.do(c)
					if !enabled {
						checkErrorBody(t, c.method+" "+c.path, resp, 404, "not_found")
						continue
					}
					if resp.StatusCode() != 200 || !json.Valid(resp.Body()) {
						t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode(), resp.Body())
					}
				}
				// Enabled, chat_failure was stored (and the discovery PUT kept m's state).
				want := 200
				if enabled {
					want = 503
				}
				if got := h.do(chat).StatusCode(); got != want {
					t.Errorf("chat after the control PUT: %d, want %d", got, want)
				}
			})
		})
	}
}

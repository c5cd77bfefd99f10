package pylon_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/testkit/rawhttp"
	"github.com/switchyard/switchyard/pylon"
)

// checkProblem asserts a problem+json answer with the given status whose body does not
// contain rawhttp.Marker, and returns its detail.
func checkProblem(t *testing.T, name string, resp *fasthttp.Response, status int) string {
	t.Helper()
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(resp.Body(), &p); err != nil || p.Detail == "" || p.Status != status {
		t.Errorf("%s: body %.200q is not a problem with status %d: %v", name, resp.Body(), status, err)
	}
	if resp.StatusCode() != status || string(resp.Header.ContentType()) != "application/problem+json" {
		t.Errorf("%s: %d %s, want %d application/problem+json", name, resp.StatusCode(), resp.Header.ContentType(), status)
	}
	if strings.Contains(string(resp.Body()), rawhttp.Marker) {
		t.Errorf("%s: the body echoes the request: %.200q", name, resp.Body())
	}
	return p.Detail
}

// Requests fasthttp cannot read get fixed problem answers: 431 for a 100 KB header, 413
// for a body over the limit, 400 for a malformed request; none echoes request bytes.
func TestUnreadableRequestsGetFixedProblems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		cfg.MaxRequestBodyBytes = 1024
		h := newHermetic(t, cfg, mock.Config{NumTokens: 1})
		defer h.close()
		for _, tc := range []struct {
			name, req string
			status    int
			detail    string
		}{
			{"100 KB header", rawhttp.HugeHeader("pylon", "/health"), 431, "request headers are too large"},
			{"100 KB request line", rawhttp.HugeRequestLine("pylon"), 431, "request headers are too large"},
			{"request line without spaces", rawhttp.LineWithoutSpaces("pylon"), 400, "malformed HTTP request"},
			{"header line without a colon", rawhttp.HeaderWithoutColon("pylon", "/health"), 400, "malformed HTTP request"},
			{"content length not a number", rawhttp.BadContentLength("pylon", "/v1/chat/completions"), 400, "malformed HTTP request"},
			{"body over the limit", rawhttp.LongBody("pylon", "/v1/chat/completions", 2048), 413, "request body exceeds the limit of 1024 bytes"},
		} {
			if got := checkProblem(t, tc.name, rawhttp.Send(t, h.lns["pylon"].Dial, tc.req), tc.status); got != tc.detail {
				t.Errorf("%s: detail %q, want %q", tc.name, got, tc.detail)
			}
		}
	})
}

// A model name the pylon does not serve is quoted in the 503 detail cut to 64 bytes.
func TestUnknownModelQuotedShortly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		h := newHermetic(t, cfg, mock.Config{NumTokens: 1})
		defer h.close()
		for _, tc := range []struct{ model, quoted string }{
			{strings.Repeat("m", 3000) + rawhttp.Marker, `"` + strings.Repeat("m", 64) + `"...`},
			{`gpt-"9"`, `"gpt-\"9\""`},
		} {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.Header.SetMethod("POST")
			req.SetRequestURI("http://pylon/v1/chat/completions")
			req.Header.Set("x-request-id", "r1")
			req.Header.Set("x-model", tc.model)
			req.Header.Set("x-input-tokens", "1")
			req.SetBodyString(`{"messages":[{"role":"user","content":"x"}]}`)
			if err := h.client.Do(req, resp); err != nil {
				t.Fatal(err)
			}
			detail := checkProblem(t, "unknown model", resp, 503)
			if want := "model " + tc.quoted + " has no admitted generation on this pylon"; detail != want {
				t.Errorf("detail %q, want %q", detail, want)
			}
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(resp)
		}
	})
}

package gateway_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/testkit/rawhttp"
)

// checkJSONError asserts an OpenAI-style JSON error with the given status and code whose
// body does not contain rawhttp.Marker, and returns its message.
func checkJSONError(t *testing.T, name string, status int, contentType string, body []byte, code string) string {
	t.Helper()
	var e struct {
		Error struct {
			Message, Type, Code string
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("%s: body %.200q is not a JSON error: %v", name, body, err)
	}
	if status != 0 && (e.Error.Code != code || contentType != "application/json") {
		t.Errorf("%s: %d %s code %q, want application/json code %q", name, status, contentType, e.Error.Code, code)
	}
	if strings.Contains(string(body), rawhttp.Marker) {
		t.Errorf("%s: the body echoes the request: %.200q", name, body)
	}
	return e.Error.Message
}

// Requests fasthttp cannot read get fixed JSON errors from the gateway: 431 for a 100 KB
// header, 413 for a body over the replay limit, 400 for a malformed request; none echoes
// request bytes (fasthttp's own errors quote them).
func TestGatewayUnreadableRequestsGetFixedErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MaxReplayBodyBytes: 1024}, "")
		for _, tc := range []struct {
			name, req string
			status    int
			code, msg string
		}{
			{"100 KB header", rawhttp.HugeHeader("gw", "/healthz"), 431, "request_header_too_large", "request headers are too large"},
			{"100 KB request line", rawhttp.HugeRequestLine("gw"), 431, "request_header_too_large", "request headers are too large"},
			{"request line without spaces", rawhttp.LineWithoutSpaces("gw"), 400, "invalid_request", "bad request: malformed HTTP request"},
			{"header line without a colon", rawhttp.HeaderWithoutColon("gw", "/healthz"), 400, "invalid_request", "bad request: malformed HTTP request"},
			{"content length not a number", rawhttp.BadContentLength("gw", "/v1/chat/completions"), 400, "invalid_request", "bad request: malformed HTTP request"},
			{
				"body over the replay limit", rawhttp.LongBody("gw", "/v1/chat/completions", 2048),
				413, "request_too_large", "request body too large: the body exceeds the replay limit of 1024 bytes",
			},
		} {
			resp := rawhttp.Send(t, h.gwLn.Dial, tc.req)
			if resp.StatusCode() != tc.status {
				t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode(), tc.status)
			}
			if msg := checkJSONError(t, tc.name, resp.StatusCode(), string(resp.Header.ContentType()), resp.Body(), tc.code); msg != tc.msg {
				t.Errorf("%s: message %q, want %q", tc.name, msg, tc.msg)
			}
		}
	})
}

// A malformed routing header's value is quoted in the 400 cut to 64 bytes.
func TestGatewayQuotesHeaderValuesShortly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		for _, tc := range []struct{ name, value, quoted string }{
			{"x-priority", "1" + strings.Repeat("2", 3000) + rawhttp.Marker, `"1` + strings.Repeat("2", 63) + `"...`},
			{"x-max-wait-ms", "-1", `"-1"`},
			{gateway.DefaultRetryBudgetHeader, "a" + strings.Repeat("ü", 40), `"a` + strings.Repeat("ü", 31) + `"...`}, // cut on a rune boundary
		} {
			resp := h.chat(map[string]string{tc.name: tc.value})
			if resp.status != 400 {
				t.Errorf("%s: status %d, want 400", tc.name, resp.status)
			}
			msg := checkJSONError(t, tc.name, resp.status, resp.headers["Content-Type"], []byte(resp.body), "invalid_request")
			if want := "bad request: header " + tc.name + " must be an unsigned integer, got " + tc.quoted; msg != want {
				t.Errorf("%s: message %q, want %q", tc.name, msg, want)
			}
		}
	})
}

// What the gateway does with a client's copy of a header that only the gateway, a pylon
// or an engine may set.
type forgedOutcome int

const (
	// forgedStripped: the pylon sees no such header.
	forgedStripped forgedOutcome = iota
	// forgedReplaced: the pylon sees only the gateway's own value, if any.
	forgedReplaced
	// forgedRejected: the header is a client header whose value must be a number; the
	// forged value is answered 400 and nothing reaches a pylon.
	forgedRejected
)

// forgedHeaders has one row per internal header name of internal/wire/headers.go (see
// TestForgedHeaderTableIsComplete).
var forgedHeaders = []struct {
	name    string
	value   string
	outcome forgedOutcome
}{
	{"x-stargate-max-wait-ms", "forged", forgedRejected}, // the client's retry budget
	{"x-stargate-expected-queue-ms", "987654", forgedReplaced},
	{"x-switchyard-dispatch-seq", "gw-evil/987654", forgedReplaced},
	{"x-switchyard-prefill-tokens", "1", forgedStripped},                 // set by the gateway only for a cached prefix
	{"x-switchyard-conversation", "conversation-forged", forgedReplaced}, // set by the gateway for a plain client's conversation
	{"x-stargate-retryable", "true", forgedStripped},
	{"x-stargate-retry-reason", "forged-reason", forgedStripped},
	{"x-stargate-retry-after-ms", "987654", forgedStripped},
	{"x-stargate-error-code", "forged-code", forgedStripped},
	{"x-pylon-load", "v=1;m=m;q=987654", forgedStripped},
	{"x-stargate-upstream-retryable", "true", forgedStripped},   // the engine's retry signal to its pylon
	{"x-stargate-cluster-id", "forged-cluster", forgedStripped}, // response headers of the gateway
	{"x-stargate-last-cluster-id", "c1", forgedStripped},        // a routing header the gateway consumes
	{"x-inference-server-id", "forged-backend", forgedStripped},
	{"x-inference-server-url", "http://forged:1", forgedStripped},
}

// A client cannot pass off a gateway-, pylon- or engine-only header: sent (twice) with a
// chat request, it never reaches the pylon with the client's value.
func TestClientCannotForgeInternalHeaders(t *testing.T) {
	for _, row := range forgedHeaders {
		t.Run(row.name, func(t *testing.T) {
			var forwarded []string
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, gateway.Config{}, "")
				p := h.pylon("p1", "c1", idleLoad(), nil)
				h.register(p)
				status, body := forgedChat(t, h, row.name, row.value)
				p.mu.Lock()
				calls := p.calls
				got, present := p.lastHeaders[string(fasthttp.AppendNormalizedHeaderKey(nil, row.name))]
				p.mu.Unlock()
				switch row.outcome {
				case forgedRejected:
					if status != 400 || calls != 0 {
						t.Errorf("status %d with %d pylon calls, want 400 and none (%s)", status, calls, body)
					}
					checkJSONError(t, row.name, 0, "", []byte(body), "invalid_request")
					return
				case forgedStripped, forgedReplaced:
				}
				if status != 200 || calls != 1 {
					t.Fatalf("status %d with %d pylon calls, want 200 and one (%s)", status, calls, body)
				}
				switch {
				case row.outcome == forgedStripped && present:
					forwarded = append(forwarded, got)
				case row.outcome == forgedReplaced && got == row.value:
					t.Errorf("the pylon got the client's %s %q", row.name, got)
				}
			})
			if len(forwarded) == 0 {
				return
			}
			t.Errorf("%s reached the pylon (%q), want it stripped", row.name, forwarded[0])
		})
	}
}

// forgedChat sends a chat request carrying name twice with value and returns the status
// and body.
func forgedChat(t *testing.T, h *harness, name, value string) (int, string) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://gateway/v1/chat/completions")
	req.Header.Add(name, value)
	req.Header.Add(strings.ToUpper(name), value)
	req.SetBodyString(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)
	if err := h.client.Do(req, resp); err != nil {
		t.Fatalf("chat: %v", err)
	}
	return resp.StatusCode(), string(resp.Body())
}

// internalPrefixes are the header name prefixes reserved to the gateway, the pylons and
// the engines' retry signal.
var internalPrefixes = []string{"x-stargate-", "x-switchyard-", "x-pylon-", "x-inference-server-"}

// Every header name with an internal prefix that internal/wire/headers.go defines, and
// the gateway's default retry-budget header, has its row in forgedHeaders: a new internal
// header cannot be added without deciding what a client's copy of it becomes.
func TestForgedHeaderTableIsComplete(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../internal/wire/headers.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var known []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		v, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range internalPrefixes {
			if strings.HasPrefix(v, p) {
				known = append(known, v)
			}
		}
		return true
	})
	if !slices.Contains(known, gateway.DefaultRetryBudgetHeader) {
		known = append(known, gateway.DefaultRetryBudgetHeader)
	}
	if len(known) < 10 {
		t.Fatalf("found only %d internal header names in internal/wire/headers.go: %v", len(known), known)
	}
	rows := map[string]bool{}
	for _, r := range forgedHeaders {
		rows[r.name] = true
	}
	for _, k := range known {
		if !rows[k] {
			t.Errorf("internal header %s has no row in forgedHeaders", k)
		}
		delete(rows, k)
	}
	for k := range rows {
		t.Errorf("forgedHeaders row %s names no header of internal/wire/headers.go", k)
	}
}

// A refused x-routing-method names the value and the model quoted and cut to 64 bytes (a
// body's model may be megabytes long).
func TestGatewayRoutingMethodErrorsQuoteShortly(t *testing.T) {
	long := strings.Repeat("z", 3000) + rawhttp.Marker
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		for _, tc := range []struct {
			name, method, model string
		}{
			{"unknown algorithm", "bogus-" + long, "m"},
			{"algorithm not allow-listed for the model", "power-of-n", "m-" + long},
		} {
			body, _ := json.Marshal(map[string]any{"model": tc.model, "messages": []map[string]string{{"role": "user", "content": "x"}}})
			resp := h.do("POST", "/v1/chat/completions", body, map[string]string{"x-routing-method": tc.method})
			if resp.status != 400 {
				t.Errorf("%s: status %d, want 400 (%.200s)", tc.name, resp.status, resp.body)
			}
			if strings.Contains(resp.body, rawhttp.Marker) || len(resp.body) > 1024 {
				t.Errorf("%s: the 400 echoes the client's value (%d bytes)", tc.name, len(resp.body))
				continue
			}
			checkJSONError(t, tc.name, resp.status, resp.headers["Content-Type"], []byte(resp.body), "invalid_request")
		}
	})
}

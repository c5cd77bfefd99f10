package mock_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/mock"
)

var fastCfg = mock.Config{ModelNames: []string{"m", "m2"}, NumTokens: 3, MaxRequestBodyBytes: 4096, EnableTestControl: true}

type errBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func TestBadInputIsAnsweredWithOpenAIErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, fastCfg)
		defer h.stop()
		for _, tc := range []struct {
			name       string
			c          call
			wantStatus int
			wantType   string
			wantCode   string
		}{
			{"malformed json", call{method: "POST", path: "/v1/chat/completions", body: `{"messages":`}, 400, "invalid_request_error", "invalid_json"},
			{"trailing garbage", call{method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"x"}]} x`}, 400, "invalid_request_error", "invalid_json"},
			{"missing messages", call{method: "POST", path: "/v1/chat/completions", body: `{"model":"m"}`}, 400, "invalid_request_error", "missing_required_parameter"},
			{"messages wrong type", call{method: "POST", path: "/v1/chat/completions", body: `{"messages":"hi"}`}, 400, "invalid_request_error", "invalid_type"},
			{"content wrong type", call{method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":5}]}`}, 400, "invalid_request_error", "invalid_type"},
			{"stream wrong type", call{method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"x"}],"stream":"yes"}`}, 400, "invalid_request_error", "invalid_type"},
			{"max_tokens zero", call{method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`}, 400, "invalid_request_error", "invalid_value"},
			{"bad x-input-tokens", call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, "x"), headers: hdrs("x-input-tokens", "lots")}, 400, "invalid_request_error", "invalid_header"},
			{"unknown model", call{method: "POST", path: "/v1/chat/completions", body: `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`}, 404, "not_found_error", "model_not_found"},
			{"missing prompt", call{method: "POST", path: "/v1/completions", body: `{}`}, 400, "invalid_request_error", "missing_required_parameter"},
			{"missing input", call{method: "POST", path: "/v1/responses", body: `{}`}, 400, "invalid_request_error", "missing_required_parameter"},
			{"bad encoding", call{method: "POST", path: "/v1/embeddings", body: `{"input":"x","encoding_format":"hex"}`}, 400, "invalid_request_error", "invalid_value"},
			{"oversize body", call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, strings.Repeat("x", 5000))}, 413, "invalid_request_error", "request_too_large"},
			{"oversize headers", call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, "x"), headers: hdrs("x-big", strings.Repeat("a", 5000))}, 431, "invalid_request_error", "request_header_too_large"},
			{"wrong method", call{method: "GET", path: "/v1/chat/completions"}, 405, "invalid_request_error", "method_not_allowed"},
			{"unknown path", call{method: "GET", path: "/v2/nothing"}, 404, "not_found_error", "not_found"},
			{"unknown control field", call{method: "PUT", path: "/test-control/models/m", body: `{"explode":true}`}, 400, "invalid_request_error", "invalid_json"},
			{"bad control value", call{method: "PUT", path: "/test-control/models/m", body: `{"fail_status":200}`}, 400, "invalid_request_error", "invalid_value"},
			{"control unknown model", call{method: "PUT", path: "/test-control/models/zz", body: `{}`}, 404, "not_found_error", "model_not_found"},
		} {
			resp := h.do(tc.c)
			var body errBody
			if err := json.Unmarshal(resp.Body(), &body); err != nil {
				t.Errorf("%s: body %q is not JSON: %v", tc.name, resp.Body(), err)
				continue
			}
			got := []any{resp.StatusCode(), body.Error.Type, body.Error.Code, body.Error.Message != ""}
			if diff := cmp.Diff([]any{tc.wantStatus, tc.wantType, tc.wantCode, true}, got); diff != "" {
				t.Errorf("%s: status, type, code, has message (-want +got):\n%s", tc.name, diff)
			}
		}
	})
}

func TestEndpointsShapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, fastCfg)
		defer h.stop()

		// Chat stream: role chunk, 3 content chunks, stop chunk, usage chunk, [DONE].
		_, events, err := h.stream(call{
			method: "POST", path: "/v1/chat/completions",
			body: `{"model":"m2","stream":true,"stream_options":{"include_usage":true},"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]}`,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 6 || events[5].data != "[DONE]" {
			t.Fatalf("chat stream events: %v", events)
		}
		var usage struct {
			Model string `json:"model"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(events[4].data), &usage)
		if usage.Model != "m2" || usage.Usage.PromptTokens != 5 || usage.Usage.CompletionTokens != 2 {
			t.Errorf("usage chunk %s", events[4].data)
		}
		if !strings.Contains(events[3].data, `"finish_reason":"length"`) {
			t.Errorf("stop chunk %s", events[3].data)
		}

		// Completions stream: 3 text chunks, a stop chunk, [DONE].
		_, events, err = h.stream(call{method: "POST", path: "/v1/completions", body: `{"prompt":["ab",[1,2,3]],"stream":true}`})
		if err != nil || len(events) != 5 || !strings.Contains(events[0].data, `"object":"text_completion"`) {
			t.Fatalf("completions stream: %v %v", events, err)
		}

		// Responses stream: created, 3 deltas, completed (no [DONE]).
		_, events, err = h.stream(call{method: "POST", path: "/v1/responses", body: `{"input":[{"role":"user","content":"hey"}],"stream":true,"max_output_tokens":10}`})
		if err != nil {
			t.Fatal(err)
		}
		kinds := make([]string, 0, len(events))
		for _, e := range events {
			kinds = append(kinds, e.event)
		}
		want := []string{"response.created", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.completed"}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Fatalf("responses events (-want +got):\n%s", diff)
		}
		var done struct {
			Response struct {
				Status string `json:"status"`
				Usage  struct {
					OutputTokens int `json:"output_tokens"`
				} `json:"usage"`
			} `json:"response"`
		}
		_ = json.Unmarshal([]byte(events[4].data), &done)
		if done.Response.Status != "completed" || done.Response.Usage.OutputTokens != 3 {
			t.Errorf("response.completed %s", events[4].data)
		}

		// Embeddings are deterministic unit vectors.
		emb := func() []float64 {
			var b struct {
				Data []struct {
					Embedding []float64 `json:"embedding"`
				} `json:"data"`
			}
			resp := h.do(call{method: "POST", path: "/v1/embeddings", body: `{"input":["a","b"],"dimensions":8}`})
			if err := json.Unmarshal(resp.Body(), &b); err != nil || len(b.Data) != 2 {
				t.Fatalf("embeddings %s: %v", resp.Body(), err)
			}
			return b.Data[0].Embedding
		}
		v1, v2 := emb(), emb()
		var norm float64
		for _, x := range v1 {
			norm += x * x
		}
		if diff := cmp.Diff(v1, v2); diff != "" || len(v1) != 8 || norm < 0.999 || norm > 1.001 {
			t.Errorf("embedding %v (norm² %v) not deterministic unit: %s", v1, norm, diff)
		}

		// Models and health.
		var models struct {
			Data []struct{ ID string } `json:"data"`
		}
		_ = json.Unmarshal(h.do(call{method: "GET", path: "/v1/models"}).Body(), &models)
		if len(models.Data) != 2 || models.Data[0].ID != "m" {
			t.Errorf("models %+v", models)
		}
		if resp := h.do(call{method: "GET", path: "/health"}); resp.StatusCode() != 200 || string(resp.Body()) != "ok" {
			t.Errorf("health %d %q", resp.StatusCode(), resp.Body())
		}
	})
}

func TestFaultInjection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, fastCfg)
		defer h.stop()
		put := func(path, body string) {
			t.Helper()
			if resp := h.do(call{method: "PUT", path: path, body: body}); resp.StatusCode() != 200 {
				t.Fatalf("PUT %s: %d %s", path, resp.StatusCode(), resp.Body())
			}
		}
		chat := func() (int, string) {
			resp := h.do(call{method: "POST", path: "/v1/chat/completions", body: chatBody(false, "x")})
			return resp.StatusCode(), string(resp.Header.Peek("Retry-After"))
		}

		put("/test-control/models/m", `{"fail_next":2,"fail_status":429,"retry_after_s":3}`)
		got := make([][2]any, 0, 3)
		for range 3 {
			s, ra := chat()
			got = append(got, [2]any{s, ra})
		}
		if diff := cmp.Diff([][2]any{{429, "3"}, {429, "3"}, {200, ""}}, got); diff != "" {
			t.Errorf("fail_next (-want +got):\n%s", diff)
		}

		put("/test-control/models/m", `{"chat_failure":true}`)
		if s, _ := chat(); s != 503 {
			t.Errorf("chat_failure gave %d", s)
		}

		// A fraction fails about that share, deterministically.
		put("/test-control/models/m", `{"fail_fraction":0.25,"fail_status":500}`)
		fails := 0
		for range 200 {
			if s, _ := chat(); s == 500 {
				fails++
			}
		}
		if fails < 30 || fails > 70 {
			t.Errorf("fail_fraction 0.25 failed %d of 200", fails)
		}

		// Delay.
		put("/test-control/models/m", `{"delay_ms":250}`)
		begin := time.Now()
		chat()
		if d := time.Since(begin); d != 250*time.Millisecond {
			t.Errorf("delay_ms 250 took %v", d)
		}

		// Drop after 2 tokens: the stream breaks after two content chunks.
		put("/test-control/models/m", `{"drop_after_tokens":2}`)
		_, events, err := h.stream(call{method: "POST", path: "/v1/chat/completions", body: chatBody(true, "x")})
		if err == nil || len(contentTimes(t, events)) != 2 {
			t.Errorf("drop_after_tokens: err %v, %d content chunks", err, len(contentTimes(t, events)))
		}

		// Hang until the control changes.
		put("/test-control/models/m", `{"hang":true}`)
		released := make(chan time.Duration)
		begin = time.Now()
		go func() {
			s, _ := chat()
			if s != 200 {
				t.Errorf("released request got %d", s)
			}
			released <- time.Since(begin)
		}()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		put("/test-control/models/m", `{}`)
		if d := <-released; d != 5*time.Second {
			t.Errorf("hang released after %v, want 5s", d)
		}

		// Slow health and the discovery list.
		put("/test-control/health", `{"delay_ms":40}`)
		begin = time.Now()
		h.do(call{method: "GET", path: "/health"})
		if d := time.Since(begin); d != 40*time.Millisecond {
			t.Errorf("health took %v", d)
		}
		put("/test-control/discovery-models", `{"models":["x1"]}`)
		if body := string(h.do(call{method: "GET", path: "/v1/models"}).Body()); !strings.Contains(body, `"id":"x1"`) || strings.Contains(body, `"id":"m"`) {
			t.Errorf("models after discovery PUT: %s", body)
		}
		if resp := h.do(call{
			method: "POST", path: "/v1/chat/completions", body: `{"model":"x1","messages":[{"role":"user","content":"x"}]}`,
			headers: hdrs("x-request-id", "calibration-1"),
		}); resp.StatusCode() != 200 {
			t.Errorf("discovered model: %d", resp.StatusCode())
		}

		var snap mock.ControlSnapshot
		if err := json.Unmarshal(h.do(call{method: "GET", path: "/test-control"}).Body(), &snap); err != nil {
			t.Fatal(err)
		}
		wantReq := []mock.RequestCount{
			{Endpoint: "chat_completions", Model: "m", Class: "api_gateway", Count: 3 + 1 + 200 + 1 + 1 + 1},
			{Endpoint: "chat_completions", Model: "x1", Class: "pylon_generated", Count: 1},
		}
		if diff := cmp.Diff(wantReq, snap.Requests); diff != "" {
			t.Errorf("request counters (-want +got):\n%s", diff)
		}
		if snap.DiscoveryRequests != 1 || snap.HealthDelayMs != 40 {
			t.Errorf("snapshot %+v", snap)
		}
	})
}

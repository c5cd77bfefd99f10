package pylon_test

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/pylon"
)

// POST bodies to the inference endpoints must be JSON objects (400 problem+json naming
// the problem otherwise), at most --max-request-body-bytes (413 problem+json), and with
// --require-streaming chat and responses bodies must set "stream": true. A rejected body
// never reaches admission or the engine.
func TestHermeticRequestBodyValidation(t *testing.T) {
	const limit = 1024
	pad := func(n int) string { // a valid chat body of exactly n bytes
		head, tail := `{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"`, `"}]}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	type check struct {
		path, body string
		status     int
		reason     string // problem reason ("" for a relayed answer)
		detail     string // substring of the problem detail
	}
	common := []check{
		{"/v1/chat/completions", `{"model":"dummy-model","messages":[`, 400, "invalid_request_body", "not valid JSON: unexpected end of JSON input at byte 35"},
		{"/v1/chat/completions", `model=dummy-model`, 400, "invalid_request_body", "not valid JSON: invalid character 'm' looking for beginning of value at byte 1"},
		{"/v1/chat/completions", ``, 400, "invalid_request_body", "empty"},
		{"/v1/responses", ` [1, 2] `, 400, "invalid_request_body", "must be a JSON object"},
		{"/v1/completions", `{"model":"dummy-model","prompt":"hi"`, 400, "invalid_request_body", "not valid JSON"},
		{"/v1/embeddings", `"hi"`, 400, "invalid_request_body", "must be a JSON object"},
		{"/v1/embeddings", `{"model":"dummy-model","input":"hi"}`, 200, "", ""},
		{"/v1/completions", `{"model":"dummy-model","prompt":"hi"}`, 200, "", ""},
		{"/v1/chat/completions", pad(limit), 200, "", ""},
		{"/v1/chat/completions", pad(limit + 1), 413, "request_body_too_large", "exceeds the limit of 1024 bytes"},
	}
	for _, tc := range []struct {
		name             string
		requireStreaming bool
		checks           []check
	}{
		{"streaming optional", false, append(common,
			check{"/v1/chat/completions", `{"model":"dummy-model","messages":[{"role":"user","content":"hi"}]}`, 200, "", ""},
			check{"/v1/responses", `{"model":"dummy-model","input":"hi","stream":false}`, 200, "", ""},
		)},
		{"require-streaming", true, append(common,
			check{"/v1/chat/completions", `{"model":"dummy-model","messages":[{"role":"user","content":"hi"}]}`, 400, "stream_required", `/v1/chat/completions requests must set "stream": true`},
			check{"/v1/responses", `{"model":"dummy-model","input":"hi","stream":false}`, 400, "stream_required", `/v1/responses requests must set "stream": true`},
			check{"/v1/chat/completions", `{"model":"dummy-model","stream" : true,"messages":[{"role":"user","content":"hi"}]}`, 200, "", ""},
			check{"/v1/responses", `{"model":"dummy-model","input":"hi","stream":true}`, 200, "", ""},
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := pylon.DefaultConfig()
				cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
				cfg.MaxRequestBodyBytes, cfg.RequireStreaming = limit, tc.requireStreaming
				h := newHermetic(t, cfg, mock.Config{NumTokens: 1})
				defer h.close()
				admitted := 0
				for i, c := range tc.checks {
					o := h.send(c.path, "body-"+string(rune('a'+i)), 1, c.body, nil)
					if o.err != nil || o.status != c.status {
						t.Errorf("%s %.40q: %d %v %s, want %d", c.path, c.body, o.status, o.err, o.body, c.status)
						continue
					}
					if c.reason == "" {
						admitted++
						continue
					}
					p := problemBody(t, &o)
					if p["reason"] != c.reason || p["status"] != float64(c.status) || !strings.Contains(p["detail"].(string), c.detail) {
						t.Errorf("%s %.40q: problem %v, want reason %q and a detail with %q", c.path, c.body, p, c.reason, c.detail)
					}
				}
				// Only the accepted bodies were admitted (and so reached the engine).
				series := `pylon_queue_admission_decisions_total{inference_server_id="pylon",model_id="dummy-model",result="missing_estimate"}`
				if got := h.scrapeMetric(series); got != float64(admitted) {
					t.Errorf("%s = %v, want %d (the accepted bodies only)", series, got, admitted)
				}
			})
		})
	}
}

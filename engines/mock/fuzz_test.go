package mock

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"
)

// Fuzz targets for every parser and the SSE framing. Seeds live in
// testdata/fuzz/<FuzzName>/ and in f.Add; plain `go test` replays both. Run one with
//
//	go test -run '^$' -fuzz '^FuzzParseRequest$' -fuzztime 30s ./engines/mock/

// fuzzEngine is an engine that is never served: handlers are called with a bare
// RequestCtx, and streams are rendered without waiting (every delay is zero).
func fuzzEngine(tb testing.TB) *Engine {
	tb.Helper()
	e, err := New(Config{ModelNames: []string{"m"}, NumTokens: 16, EnableTestControl: true}, Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return e
}

// fuzzNumTokens is the engine default the token-count invariants are checked against.
const fuzzNumTokens = 16

// FuzzParseRequest feeds arbitrary bodies to the four generation endpoints' parser. It
// never panics; a rejection is an OpenAI-style 400; an accepted request respects the
// token invariants and renders a non-streamed body that is valid JSON.
func FuzzParseRequest(f *testing.F) {
	for ep, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":["ab",[1,2,3],7],"max_tokens":40}`,
		`{"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hey"}]}],"max_output_tokens":2}`,
		`{"input":["a",[1,2],3],"dimensions":8,"encoding_format":"base64"}`,
	} {
		f.Add(uint8(ep), []byte(body))
	}
	f.Add(uint8(0), []byte(`{"messages":[{"role":"user","content":null}],"max_completion_tokens":1,"max_tokens":9}`))
	f.Add(uint8(1), []byte(`{"prompt":"x","max_tokens":0}`))
	f.Add(uint8(2), []byte(`{"input":"\u2028\ud800\"\\"}`))
	f.Add(uint8(3), []byte(`{"input":[]}`))
	e := fuzzEngine(f)
	ms := e.model("m")
	f.Fuzz(func(t *testing.T, epByte uint8, raw []byte) {
		ep := endpoint(epByte % uint8(numEndpoints))
		r, err := parseRequest(ep, raw)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.Status != fasthttp.StatusBadRequest || ae.Type != typeInvalidRequest || ae.Code == "" || ae.Message == "" {
				t.Fatalf("rejection %#v is not an OpenAI-style 400", err)
			}
			return
		}
		if r.endpoint != ep || r.estimatedTokens < 1 || r.maxTokens < 0 {
			t.Fatalf("parsed %+v: endpoint, estimate ≥ 1 or max_tokens ≥ 0 broken", r)
		}
		if ep == epEmbeddings && (len(r.embedInputs) == 0 || r.dimensions < 1 || r.dimensions > 8192) {
			t.Fatalf("embeddings request %+v: no input or dimensions out of [1, 8192]", r)
		}
		var h fasthttp.RequestHeader
		if err := r.tokenCounts(&h, fuzzNumTokens); err != nil {
			t.Fatalf("tokenCounts without headers: %v", err)
		}
		checkOutputTokens(t, r, fuzzNumTokens, false)
		if r.inputTokens != r.estimatedTokens {
			t.Fatalf("input tokens %d, want the estimate %d", r.inputTokens, r.estimatedTokens)
		}
		r.model = "m"
		var out []byte
		if ep == epEmbeddings {
			out = e.embeddingsBody(r)
		} else {
			g := &gen{e: e, req: r, model: ms, id: "fuzz", emitted: r.outputTokens}
			out = g.completeBody(nil)
		}
		if !json.Valid(out) {
			t.Fatalf("response body is not JSON: %q", out)
		}
	})
}

// checkOutputTokens asserts the output-token rule of doc.go: min(max_tokens, numTokens)
// without x-output-tokens, at least 1, finish_reason "length" exactly when a limit cut it.
func checkOutputTokens(t *testing.T, r *request, numTokens int, outHeader bool) {
	t.Helper()
	if r.outputTokens < 1 {
		t.Fatalf("output tokens %d < 1", r.outputTokens)
	}
	if outHeader {
		return
	}
	want, byLength := max(numTokens, 1), false
	if r.maxTokens > 0 && r.maxTokens < numTokens {
		want, byLength = r.maxTokens, true
	}
	if r.outputTokens != want || r.finishByLength != byLength {
		t.Fatalf("max_tokens %d, num tokens %d: output %d (by length %v), want %d (%v)",
			r.maxTokens, numTokens, r.outputTokens, r.finishByLength, want, byLength)
	}
}

// FuzzTokenEstimate checks the token estimator and the token-count headers: the estimate
// is the number of characters of every message's text, at least the number of messages,
// at least 1; x-input-tokens replaces it; the output follows max_tokens unless
// x-output-tokens is set; malformed headers are 400s.
func FuzzTokenEstimate(f *testing.F) {
	f.Add("user", "hello", "assistant", "héllo wörld", "", "", 0, 10)
	f.Add("system", "", "user", "", "", "", 5, 10)
	f.Add("user", "\xff\xfe", "user", "日本語", "120", "7", 3, 10)
	f.Add("user", "x", "user", "y", "-1", "lots", 1, 0)
	f.Add("user", "x", "user", "y", "18446744073709551616", "2147483648", 2, 1)
	f.Fuzz(func(t *testing.T, role1, text1, role2, text2, inHdr, outHdr string, maxTokens, numTokens int) {
		if role1 == "" || role2 == "" || numTokens < 0 || numTokens > 1<<20 {
			return // empty roles are rejected; numTokens comes from a validated config
		}
		msgs := []map[string]any{{"role": role1, "content": text1}, {"role": role2, "content": []map[string]string{{"type": "text", "text": text2}}}}
		body := map[string]any{"messages": msgs}
		if maxTokens != 0 {
			body["max_tokens"] = maxTokens
		}
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r, err := parseRequest(epChat, raw)
		if maxTokens < 0 {
			if err == nil {
				t.Fatalf("max_tokens %d accepted", maxTokens)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid body %s rejected: %v", raw, err)
		}
		// encoding/json turns invalid UTF-8 into U+FFFD, one character per bad byte.
		chars := utf8.RuneCountInString(text1) + utf8.RuneCountInString(text2)
		if want := uint64(max(chars, 2)); r.estimatedTokens != want {
			t.Fatalf("estimate %d for %q + %q, want %d", r.estimatedTokens, text1, text2, want)
		}
		var h fasthttp.RequestHeader
		if inHdr != "" {
			h.Set(headerInputTokens, inHdr)
		}
		if outHdr != "" {
			h.Set(headerOutputTokens, outHdr)
		}
		err = r.tokenCounts(&h, numTokens)
		inSet, outSet := len(h.Peek(headerInputTokens)) > 0, len(h.Peek(headerOutputTokens)) > 0
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.Status != fasthttp.StatusBadRequest || ae.Code != "invalid_header" {
				t.Fatalf("header error %#v is not an invalid_header 400", err)
			}
			if !inSet && !outSet {
				t.Fatalf("error without token headers: %v", err)
			}
			return
		}
		if r.inputTokens < 1 || (!inSet && r.inputTokens != r.estimatedTokens) {
			t.Fatalf("input tokens %d (estimate %d, header %q)", r.inputTokens, r.estimatedTokens, inHdr)
		}
		checkOutputTokens(t, r, numTokens, outSet)
	})
}

// FuzzControl PUTs arbitrary bodies to the three /test-control endpoints through the
// engine's handler: the answer is 200 with the stored control or an OpenAI-style 400,
// and a stored model control validates and round-trips through JSON.
func FuzzControl(f *testing.F) {
	for _, s := range []struct {
		path uint8
		body string
	}{
		{0, `{"fail_next":2,"fail_status":429,"retry_after_s":3}`},
		{0, `{"fail_fraction":0.5,"delay_ms":10,"drop_after_tokens":3}`},
		{0, `{"chat_failure":true,"bringup_blocked":true,"hang":false}`},
		{0, `{"fail_status":200}`},
		{0, `{"fail_fraction":1e400}`},
		{0, `{"explode":true}`},
		{1, `{"models":["a","b\"\\\n"]}`},
		{1, `{"models":[""]}`},
		{2, `{"delay_ms":-1}`},
		{2, `{"delay_ms":5}{}`},
	} {
		f.Add(s.path, []byte(s.body))
	}
	paths := []string{"/test-control/models/m", "/test-control/discovery-models", "/test-control/health"}
	f.Fuzz(func(t *testing.T, path uint8, body []byte) {
		e := fuzzEngine(t) // fresh: discovery PUTs add models
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(fasthttp.MethodPut)
		ctx.Request.SetRequestURI(paths[int(path)%len(paths)])
		ctx.Request.SetBody(body)
		e.Handler(&ctx)
		status, out := ctx.Response.StatusCode(), ctx.Response.Body()
		switch status {
		case fasthttp.StatusOK:
		case fasthttp.StatusBadRequest:
			var eb struct {
				Error struct {
					Type string `json:"type"`
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(out, &eb); err != nil || eb.Error.Type != typeInvalidRequest || eb.Error.Code == "" {
				t.Fatalf("400 body %q is not an OpenAI error: %v", out, err)
			}
			return
		default:
			t.Fatalf("status %d for %q: %s", status, body, out)
		}
		if int(path)%len(paths) != 0 {
			if !json.Valid(out) {
				t.Fatalf("200 body %q is not JSON", out)
			}
			return
		}
		var c Control
		if err := decodeStrict(out, &c); err != nil {
			t.Fatalf("answered control %q does not decode: %v", out, err)
		}
		e.mu.Lock()
		stored := e.models["m"].control
		e.mu.Unlock()
		if err := stored.validate(); err != nil {
			t.Fatalf("stored control %+v is invalid: %v", stored, err)
		}
		if diff := cmp.Diff(stored, c); diff != "" {
			t.Fatalf("answered control differs from the stored one (-stored +answered):\n%s", diff)
		}
	})
}

// FuzzSSEFraming renders whole streams with arbitrary request IDs, model names and
// token counts, through WriteTo and through Read with an arbitrary buffer size. Both give
// the same bytes; every event is `[event: <name>\n]data: <json>\n\n` (the last chat or
// completions event is `data: [DONE]\n\n`); every JSON parses; the chat and completions
// deltas concatenate to the generated text.
func FuzzSSEFraming(f *testing.F) {
	f.Add(uint8(0), "req-1", "m", uint16(3), true, true, uint16(4096))
	f.Add(uint8(1), "a\"b\\c\n\u2028", "model\x00\xff", uint16(0), false, false, uint16(1))
	f.Add(uint8(2), "\xff\xfe", "日本", uint16(25), true, false, uint16(7))
	f.Add(uint8(0), "", "", uint16(1), false, true, uint16(0))
	e := fuzzEngine(f)
	f.Fuzz(func(t *testing.T, epByte uint8, id, model string, tokens uint16, usage, byLength bool, readSize uint16) {
		ep := []endpoint{epChat, epCompletions, epResponses}[int(epByte)%3]
		outputTokens := max(int(tokens)%200, 1)
		newGen := func() *gen {
			r := &request{endpoint: ep, model: model, stream: true, includeUsage: usage, inputTokens: 5, outputTokens: outputTokens, finishByLength: byLength}
			return &gen{e: e, req: r, model: &modelState{name: model, metrics: e.models["m"].metrics}, id: id, start: time.Unix(1700000000, 0)}
		}
		var viaWriteTo bytes.Buffer
		s := newSSEStream(newGen(), -1)
		if _, err := s.WriteTo(&viaWriteTo); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		viaRead, err := io.ReadAll(&sizedReader{r: newSSEStream(newGen(), -1), size: int(readSize)%600 + 1})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if !bytes.Equal(viaWriteTo.Bytes(), viaRead) {
			t.Fatalf("WriteTo and Read differ:\n%q\n%q", viaWriteTo.Bytes(), viaRead)
		}
		events := parseSSE(t, viaWriteTo.Bytes())
		var text strings.Builder
		for i, ev := range events {
			last := i == len(events)-1
			if ep != epResponses && last {
				if ev.data != "[DONE]" || ev.name != "" {
					t.Fatalf("last event %+v, want data: [DONE]", ev)
				}
				continue
			}
			if (ep == epResponses) != (ev.name != "") {
				t.Fatalf("event %d has name %q", i, ev.name)
			}
			var chunk struct {
				Delta   string `json:"delta"`
				Choices []struct {
					Text  string `json:"text"`
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(ev.data), &chunk); err != nil {
				t.Fatalf("event %d data is not JSON: %v\n%s", i, err, ev.data)
			}
			text.WriteString(chunk.Delta)
			for _, c := range chunk.Choices {
				text.WriteString(c.Text + c.Delta.Content)
			}
		}
		var want strings.Builder
		for i := range outputTokens {
			want.WriteString(tokenText(i))
		}
		if text.String() != want.String() {
			t.Fatalf("deltas concatenate to %q, want %q", text.String(), want.String())
		}
	})
}

// sizedReader reads from r with buffers of a fixed size, as a consumer with a small
// buffer would.
type sizedReader struct {
	r    io.Reader
	size int
}

func (s *sizedReader) Read(p []byte) (int, error) {
	return s.r.Read(p[:min(len(p), s.size)])
}

type sseEvent struct{ name, data string }

// parseSSE splits a stream into events and fails on anything but the engine's framing.
func parseSSE(t *testing.T, b []byte) []sseEvent {
	t.Helper()
	if !bytes.HasSuffix(b, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", b)
	}
	blocks := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	events := make([]sseEvent, 0, len(blocks))
	for _, block := range blocks {
		var ev sseEvent
		lines := strings.Split(block, "\n")
		if name, ok := strings.CutPrefix(lines[0], "event: "); ok && len(lines) == 2 {
			ev.name, lines = name, lines[1:]
		}
		data, ok := strings.CutPrefix(lines[0], "data: ")
		if len(lines) != 1 || !ok || data == "" {
			t.Fatalf("bad event block %q", block)
		}
		ev.data = data
		events = append(events, ev)
	}
	return events
}

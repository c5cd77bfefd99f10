package mock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

// endpoint identifies an OpenAI endpoint.
type endpoint uint8

const (
	epChat endpoint = iota
	epCompletions
	epResponses
	epEmbeddings
	numEndpoints
)

var endpointNames = [numEndpoints]string{"chat_completions", "completions", "responses", "embeddings"}

func (e endpoint) String() string { return endpointNames[e] }

// Request headers read by the engine.
const (
	headerInputTokens   = "x-input-tokens"  //nolint:gosec // a header name, not a credential
	headerOutputTokens  = "x-output-tokens" //nolint:gosec // a header name, not a credential
	headerAffinityKey   = "x-cache-affinity-key"
	headerRequestID     = "x-request-id"
	headerKVHit         = "x-kv-cache-hit"
	headerKVReused      = "x-kv-cache-reused-input-tokens"
	headerKVUncached    = "x-kv-cache-uncached-input-tokens"
	headerKVEvictedEnts = "x-kv-cache-evicted-entries"
	headerKVEvictedToks = "x-kv-cache-evicted-tokens"
	// headerQueued is "true" on a request that found every concurrency slot taken and
	// waited for one (legacy timing): the engine was pushed past its concurrency.
	headerQueued = "x-engine-queued"
)

// body is the union of the request fields the engine reads from the four endpoints.
type body struct {
	Model               *string         `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Instructions        *string         `json:"instructions"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MaxOutputTokens     *int            `json:"max_output_tokens"`
	EncodingFormat      *string         `json:"encoding_format"`
	Dimensions          *int            `json:"dimensions"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// request is a parsed generation request.
type request struct {
	endpoint     endpoint
	model        string
	stream       bool
	includeUsage bool
	// maxTokens is the client's limit on output tokens, 0 when absent.
	maxTokens int
	// prefix is the prompt's content (role and text of each message, separated), used for
	// block hashing when there is no affinity key.
	prefix []byte
	// estimatedTokens is the body-based input token estimate (see estimate rules in doc.go).
	estimatedTokens uint64
	// embedInputs are the texts to embed (embeddings only).
	embedInputs    []string
	base64         bool
	dimensions     int
	inputTokens    uint64
	outputTokens   int
	finishByLength bool
}

// parseRequest decodes and validates an OpenAI request body.
func parseRequest(ep endpoint, raw []byte) (*request, error) {
	var b body
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, badRequest("invalid_type", fmt.Sprintf("invalid type for '%s': expected %s", te.Field, te.Type))
		}
		return nil, badRequest("invalid_json", "the request body is not valid JSON")
	}
	if dec.More() {
		return nil, badRequest("invalid_json", "the request body is not valid JSON")
	}
	r := &request{endpoint: ep}
	if b.Model != nil {
		r.model = *b.Model
	}
	if b.Stream != nil {
		r.stream = *b.Stream
	}
	if b.StreamOptions != nil {
		r.includeUsage = b.StreamOptions.IncludeUsage
	}
	for _, lim := range []struct {
		name string
		v    *int
	}{{"max_tokens", b.MaxTokens}, {"max_completion_tokens", b.MaxCompletionTokens}, {"max_output_tokens", b.MaxOutputTokens}} {
		if lim.v == nil {
			continue
		}
		if *lim.v < 1 {
			return nil, badRequest("invalid_value", fmt.Sprintf("'%s' must be at least 1, got %d", lim.name, *lim.v))
		}
		if r.maxTokens == 0 || *lim.v < r.maxTokens {
			r.maxTokens = *lim.v
		}
	}
	var err error
	switch ep {
	case epChat:
		err = r.parseMessages(b.Messages, "messages")
	case epCompletions:
		err = r.parsePrompt(b.Prompt, "prompt")
	case epResponses:
		if b.Instructions != nil {
			r.addText("system", *b.Instructions)
		}
		err = r.parseResponsesInput(b.Input)
	case epEmbeddings:
		err = r.parseEmbeddingsInput(b)
	case numEndpoints:
	}
	if err != nil {
		return nil, err
	}
	r.estimatedTokens = max(r.estimatedTokens, 1)
	return r, nil
}

func missing(param string) error {
	return badRequest("missing_required_parameter", fmt.Sprintf("missing required parameter: '%s'", param))
}

func invalidType(param, want string) error {
	return badRequest("invalid_type", fmt.Sprintf("invalid type for '%s': expected %s", param, want))
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// addText appends one message to the prefix and counts its characters.
func (r *request) addText(role, text string) {
	r.prefix = append(r.prefix, role...)
	r.prefix = append(r.prefix, 0)
	r.prefix = append(r.prefix, text...)
	r.prefix = append(r.prefix, 1)
	r.estimatedTokens += u64(utf8.RuneCountInString(text))
}

// contentText decodes a message content: a string, an array of parts with "text", or null.
func contentText(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case isNull(raw):
		return "", nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", invalidType(param, "string or array")
		}
		return s, nil
	case raw[0] == '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", invalidType(param, "string or array of content parts")
		}
		var sb []byte
		for _, p := range parts {
			sb = append(sb, p.Text...)
		}
		return string(sb), nil
	default:
		return "", invalidType(param, "string or array")
	}
}

func (r *request) parseMessages(raw json.RawMessage, param string) error {
	if isNull(raw) {
		return missing(param)
	}
	var msgs []message
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return invalidType(param, "array of messages")
	}
	if len(msgs) == 0 {
		return badRequest("invalid_value", fmt.Sprintf("'%s' must contain at least one message", param))
	}
	for i, m := range msgs {
		if m.Role == "" {
			return missing(fmt.Sprintf("%s[%d].role", param, i))
		}
		text, err := contentText(m.Content, fmt.Sprintf("%s[%d].content", param, i))
		if err != nil {
			return err
		}
		r.addText(m.Role, text)
	}
	r.estimatedTokens = max(r.estimatedTokens, u64(len(msgs)))
	return nil
}

func (r *request) parsePrompt(raw json.RawMessage, param string) error {
	if isNull(raw) {
		return missing(param)
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return invalidType(param, "string or array")
		}
		r.addText("", s)
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return invalidType(param, "string or array")
	}
	for _, it := range items {
		it = bytes.TrimSpace(it)
		switch {
		case len(it) > 0 && it[0] == '"':
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return invalidType(param, "array of strings or token IDs")
			}
			r.addText("", s)
		case len(it) > 0 && it[0] == '[':
			var toks []int64
			if err := json.Unmarshal(it, &toks); err != nil {
				return invalidType(param, "array of strings or token IDs")
			}
			r.addTokens(toks)
		default:
			var tok int64
			if err := json.Unmarshal(it, &tok); err != nil {
				return invalidType(param, "array of strings or token IDs")
			}
			r.addTokens([]int64{tok})
		}
	}
	return nil
}

// addTokens appends token IDs to the prefix; each counts as one token.
func (r *request) addTokens(toks []int64) {
	for _, t := range toks {
		r.prefix = strconv.AppendInt(r.prefix, t, 36)
		r.prefix = append(r.prefix, ',')
	}
	r.estimatedTokens += u64(len(toks))
}

func (r *request) parseResponsesInput(raw json.RawMessage) error {
	if isNull(raw) {
		return missing("input")
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return invalidType("input", "string or array")
		}
		r.addText("user", s)
		return nil
	}
	var items []message
	if err := json.Unmarshal(raw, &items); err != nil {
		return invalidType("input", "string or array of input items")
	}
	for i, m := range items {
		text, err := contentText(m.Content, fmt.Sprintf("input[%d].content", i))
		if err != nil {
			return err
		}
		r.addText(m.Role, text)
	}
	r.estimatedTokens = max(r.estimatedTokens, u64(len(items)))
	return nil
}

func (r *request) parseEmbeddingsInput(b body) error {
	if isNull(b.Input) {
		return missing("input")
	}
	raw := bytes.TrimSpace(b.Input)
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return invalidType("input", "string or array")
		}
		r.embedInputs = []string{s}
		r.addText("", s)
	default:
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return invalidType("input", "string or array")
		}
		if len(items) == 0 {
			return badRequest("invalid_value", "'input' must not be empty")
		}
		for _, it := range items {
			var s string
			if err := json.Unmarshal(it, &s); err == nil {
				r.embedInputs = append(r.embedInputs, s)
				r.addText("", s)
				continue
			}
			var toks []int64
			if err := json.Unmarshal(it, &toks); err != nil {
				var tok int64
				if err := json.Unmarshal(it, &tok); err != nil {
					return invalidType("input", "string, array of strings or token IDs")
				}
				toks = []int64{tok}
			}
			start := len(r.prefix)
			r.addTokens(toks)
			r.embedInputs = append(r.embedInputs, string(r.prefix[start:]))
		}
	}
	if b.EncodingFormat != nil {
		switch *b.EncodingFormat {
		case "float":
		case "base64":
			r.base64 = true
		default:
			return badRequest("invalid_value", "'encoding_format' must be \"float\" or \"base64\"")
		}
	}
	r.dimensions = DefaultEmbeddingDimensions
	if b.Dimensions != nil {
		if *b.Dimensions < 1 || *b.Dimensions > 8192 {
			return badRequest("invalid_value", "'dimensions' must be between 1 and 8192")
		}
		r.dimensions = *b.Dimensions
	}
	return nil
}

// tokenCounts applies the x-input-tokens / x-output-tokens headers and the limits.
func (r *request) tokenCounts(h *fasthttp.RequestHeader, numTokens int) error {
	r.inputTokens = r.estimatedTokens
	if v := h.Peek(headerInputTokens); len(v) > 0 {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return badRequest("invalid_header", "x-input-tokens must be a non-negative integer")
		}
		r.inputTokens = max(n, 1)
	}
	r.outputTokens = numTokens
	if r.maxTokens > 0 && r.maxTokens < numTokens {
		r.outputTokens = r.maxTokens
		r.finishByLength = true
	}
	if v := h.Peek(headerOutputTokens); len(v) > 0 {
		n, err := strconv.ParseUint(string(v), 10, 31)
		if err != nil {
			return badRequest("invalid_header", "x-output-tokens must be a non-negative integer")
		}
		// As in the reference mock, the header wins over max_tokens.
		r.outputTokens = int(n)
		r.finishByLength = r.maxTokens > 0 && r.outputTokens >= r.maxTokens
	}
	r.outputTokens = max(r.outputTokens, 1)
	return nil
}

package mock

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"

	"github.com/zeebo/xxh3"
)

func (g *gen) finishReason() string {
	if g.req.finishByLength {
		return "length"
	}
	return "stop"
}

func (g *gen) outputText() []byte {
	b := make([]byte, 0, 8*g.emitted)
	for i := range g.emitted {
		b = append(b, tokenText(i)...)
	}
	return b
}

// appendChunkHead appends `{"id":…,"object":…,"created":…,"model":…,`.
func (g *gen) appendChunkHead(b []byte, object string) []byte {
	b = append(b, `{"id":"`...)
	if g.req.endpoint == epCompletions {
		b = append(b, "cmpl-"...)
	} else {
		b = append(b, "chatcmpl-"...)
	}
	b = appendJSONInner(b, g.id)
	b = append(b, `","object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = appendInt(b, g.start.Unix())
	b = append(b, `,"model":`...)
	b = appendJSONString(b, g.model.name)
	return append(b, ',')
}

// appendJSONInner appends s escaped for use inside a JSON string literal.
func appendJSONInner(b []byte, s string) []byte {
	start := len(b)
	b = appendJSONString(b, s)
	copy(b[start:], b[start+1:len(b)-1])
	return b[:len(b)-2]
}

// chunkObject is the "object" of streamed chunks.
func (g *gen) chunkObject() string {
	if g.req.endpoint == epCompletions {
		return "text_completion"
	}
	return "chat.completion.chunk"
}

// chunkPrefix appends the start of every streamed chunk up to the choice's fields.
func (g *gen) chunkPrefix(b []byte) []byte {
	b = g.appendChunkHead(b, g.chunkObject())
	return append(b, `"choices":[{"index":0,`...)
}

func (g *gen) appendUsage(b []byte) []byte {
	in, out := g.req.inputTokens, u64(g.emitted)
	b = append(b, `{"prompt_tokens":`...)
	b = appendUint(b, in)
	b = append(b, `,"completion_tokens":`...)
	b = appendUint(b, out)
	b = append(b, `,"total_tokens":`...)
	b = appendUint(b, in+out)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = appendUint(b, g.access.Reused)
	return append(b, "}}"...)
}

// appendResponseObject appends a Responses API response object.
func (g *gen) appendResponseObject(b []byte, status string, text []byte) []byte {
	b = append(b, `{"id":"resp_`...)
	b = appendJSONInner(b, g.id)
	b = append(b, `","object":"response","created_at":`...)
	b = appendInt(b, g.start.Unix())
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","model":`...)
	b = appendJSONString(b, g.model.name)
	b = append(b, `,"output":[`...)
	if text != nil {
		b = append(b, `{"type":"message","id":"msg_`...)
		b = appendJSONInner(b, g.id)
		b = append(b, `","status":"completed","role":"assistant","content":[{"type":"output_text","text":`...)
		b = appendJSONString(b, string(text))
		b = append(b, `,"annotations":[]}]}`...)
	}
	b = append(b, `],"usage":`...)
	if status != "completed" {
		return append(b, "null}"...)
	}
	in, out := g.req.inputTokens, u64(g.emitted)
	b = append(b, `{"input_tokens":`...)
	b = appendUint(b, in)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = appendUint(b, g.access.Reused)
	b = append(b, `},"output_tokens":`...)
	b = appendUint(b, out)
	b = append(b, `,"total_tokens":`...)
	b = appendUint(b, in+out)
	return append(b, "}}"...)
}

// completeBody renders the non-streaming response of a chat, completion or responses request.
func (g *gen) completeBody(b []byte) []byte {
	text := g.outputText()
	switch g.req.endpoint {
	case epResponses:
		return g.appendResponseObject(b, "completed", text)
	case epCompletions:
		b = g.appendChunkHead(b, "text_completion")
		b = append(b, `"choices":[{"index":0,"text":`...)
		b = appendJSONString(b, string(text))
		b = append(b, `,"logprobs":null,"finish_reason":`...)
	default:
		b = g.appendChunkHead(b, "chat.completion")
		b = append(b, `"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = appendJSONString(b, string(text))
		b = append(b, `},"logprobs":null,"finish_reason":`...)
	}
	b = appendJSONString(b, g.finishReason())
	b = append(b, `}],"usage":`...)
	b = g.appendUsage(b)
	return append(b, '}')
}

// embeddingsBody renders deterministic unit vectors: each input's xxh3 hash (seeded with
// the engine seed) drives a splitmix64 sequence of components in [-1, 1), normalised.
func (e *Engine) embeddingsBody(r *request) []byte {
	b := []byte(`{"object":"list","data":[`)
	vec := make([]float32, r.dimensions)
	raw := make([]byte, 4*r.dimensions)
	for i, in := range r.embedInputs {
		state := xxh3.HashStringSeed(in, e.cfg.Seed)
		var norm float64
		for j := range vec {
			state += 0x9e3779b97f4a7c15
			z := state
			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
			z = (z ^ (z >> 27)) * 0x94d049bb133111eb
			z ^= z >> 31
			v := float64(z>>11)/float64(1<<53)*2 - 1
			vec[j] = float32(v)
			norm += v * v
		}
		norm = math.Sqrt(norm)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		if r.base64 {
			for j, v := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(float32(float64(v)/norm)))
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, raw)
			b = append(b, '"')
		} else {
			b = append(b, '[')
			for j, v := range vec {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(float32(float64(v)/norm)), 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	b = appendJSONString(b, r.model)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = appendUint(b, r.inputTokens)
	b = append(b, `,"total_tokens":`...)
	b = appendUint(b, r.inputTokens)
	return append(b, "}}"...)
}

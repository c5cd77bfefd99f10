// Package relay is the streaming and socket layer the gateway and the pylon share: raw
// socket reads and writes on Linux (rawio*.go) and the per-connection watchdog that enforces
// first-output and stream-idle deadlines (conns.go), the stream copy loop with its typed
// endings (stream.go, ending.go), and a scanner that watches an OpenAI-style SSE (or JSON)
// response for the first output and the usage fields without changing a byte (the pylon
// feeds it while fasthttp copies the engine's chunks to the gateway one by one).
package relay

import (
	"bytes"
	"strconv"
)

// MaxEventBytes bounds the partial SSE line kept between chunks; longer lines are skipped.
const MaxEventBytes = 1 << 20

// Usage is what the scanner learned about a response.
type Usage struct {
	// OutputChunks counts data events that carried output (the token count of last resort).
	OutputChunks uint64
	// CompletionTokens and PromptTokens come from usage fields when HasUsage.
	CompletionTokens uint64
	PromptTokens     uint64
	HasUsage         bool
	Done             bool // [DONE] seen
}

// OutputTokens is the best token count: the usage field when reported, else the chunk count.
func (u *Usage) OutputTokens() uint64 {
	if u.HasUsage {
		return u.CompletionTokens
	}
	return u.OutputChunks
}

// Scanner splits an SSE byte stream into lines and inspects each data line. The zero value
// is ready. Not safe for concurrent use.
type Scanner struct {
	partial  []byte
	skipping bool
	Usage    Usage
}

// Feed scans a chunk and reports whether a data event in it carried the first output.
func (s *Scanner) Feed(chunk []byte) (firstOutput bool) {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			if !s.skipping {
				if len(s.partial)+len(chunk) > MaxEventBytes {
					s.partial, s.skipping = s.partial[:0], true
				} else {
					s.partial = append(s.partial, chunk...)
				}
			}
			return firstOutput
		}
		line := chunk[:i]
		chunk = chunk[i+1:]
		if s.skipping || len(s.partial)+len(line) > MaxEventBytes {
			s.partial, s.skipping = s.partial[:0], false
			continue
		}
		if len(s.partial) > 0 {
			s.partial = append(s.partial, line...)
			line = s.partial
		}
		if s.line(line) && s.Usage.OutputChunks == 1 {
			firstOutput = true
		}
		s.partial = s.partial[:0]
	}
	return firstOutput
}

var (
	dataPrefix = []byte("data:")
	doneMarker = []byte("[DONE]")
)

// line inspects one SSE line; it reports whether it carried output.
func (s *Scanner) line(line []byte) bool {
	line = bytes.TrimRight(line, "\r")
	if !bytes.HasPrefix(line, dataPrefix) {
		return false
	}
	data := bytes.TrimSpace(line[len(dataPrefix):])
	if bytes.Equal(data, doneMarker) {
		s.Usage.Done = true
		return false
	}
	s.JSON(data)
	if HasOutput(data) {
		s.Usage.OutputChunks++
		return true
	}
	return false
}

// JSON records usage fields found in a JSON payload (a data event or a whole body).
func (s *Scanner) JSON(data []byte) {
	if bytes.Contains(data, []byte(`"usage"`)) || bytes.Contains(data, []byte(`"output_tokens_so_far"`)) {
		if v, ok := uintField(data, `"completion_tokens"`); ok {
			s.Usage.CompletionTokens, s.Usage.HasUsage = v, true
		} else if v, ok := uintField(data, `"output_tokens"`); ok {
			s.Usage.CompletionTokens, s.Usage.HasUsage = v, true
		} else if v, ok := uintField(data, `"output_tokens_so_far"`); ok {
			s.Usage.CompletionTokens, s.Usage.HasUsage = v, true
		}
		if v, ok := uintField(data, `"prompt_tokens"`); ok {
			s.Usage.PromptTokens = v
		} else if v, ok := uintField(data, `"input_tokens"`); ok {
			s.Usage.PromptTokens = v
		}
	}
}

// HasOutput reports whether a JSON payload carries generated output: a non-empty
// "content", "text" or "delta" string, or a finish reason.
func HasOutput(data []byte) bool {
	for _, key := range [...]string{`"content":"`, `"text":"`, `"delta":"`} {
		if i := bytes.Index(data, []byte(key)); i >= 0 && i+len(key) < len(data) && data[i+len(key)] != '"' {
			return true
		}
	}
	return bytes.Contains(data, []byte(`"finish_reason":"`))
}

func uintField(data []byte, key string) (uint64, bool) {
	i := bytes.LastIndex(data, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(data[i+len(key):], " \t:")
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	v, err := strconv.ParseUint(string(rest[:j]), 10, 64)
	return v, err == nil
}

package gateway

import "bytes"

// promptKeys are the JSON keys whose values hold an OpenAI request's prompt: chat
// completions' messages, completions' prompt, responses' input.
var promptKeys = [...][]byte{[]byte(`"messages"`), []byte(`"prompt"`), []byte(`"input"`)}

// promptContent returns the part of a raw JSON request body that prefix-aware routing
// hashes: from the first prompt key on, so that fields a client varies per request before
// it (temperature, user, …) do not break the match; the whole body when it has none.
// Clients that append each turn to the conversation keep the leading bytes of this
// content stable between turns, which is what the prefix index matches. The body is not
// parsed: a prompt key inside an earlier string value only shortens the match.
func promptContent(body []byte) []byte {
	start := -1
	for _, k := range promptKeys {
		if i := bytes.Index(body, k); i >= 0 && (start < 0 || i < start) {
			start = i
		}
	}
	if start < 0 {
		return body
	}
	return body[start:]
}

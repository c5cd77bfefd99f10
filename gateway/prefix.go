package gateway

import (
	"bytes"
	"strconv"

	"github.com/zeebo/xxh3"
)

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

// conversationHash identifies a plain chat client's conversation: a hash of its body's
// "messages" array up to the end of the first user message (the system prompt and the
// conversation's opening question), which a client that appends each turn sends
// unchanged, byte for byte, in every later turn; distinct conversations that share only
// a system prompt differ. 0 when the body has no messages array or no user message in
// it. Not a JSON parser: it tracks strings and nesting to find the array's elements, and
// takes the first element naming the role "user".
func conversationHash(body []byte) uint64 {
	i := bytes.Index(body, promptKeys[0])
	if i < 0 {
		return 0
	}
	start := i
	i, ok := afterColon(body, i+len(promptKeys[0]))
	if !ok || i >= len(body) || body[i] != '[' {
		return 0
	}
	i++ // past '['
	depth, elem, inString := 0, -1, false
	for ; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth == 0 {
				elem = i
			}
			depth++
		case '}', ']':
			if depth == 0 { // the end of the messages array
				return 0
			}
			depth--
			if depth == 0 && isUserMessage(body[elem:i+1]) {
				return xxh3.Hash(body[start : i+1])
			}
		}
	}
	return 0
}

// conversationKey is the session key of a plain client's conversation (conversationHash).
func conversationKey(h uint64) string {
	return "conversation-" + strconv.FormatUint(h, 16)
}

// isUserMessage reports whether a message object names the role "user" (with or without
// a space after the colon).
func isUserMessage(msg []byte) bool {
	return bytes.Contains(msg, roleUser) || bytes.Contains(msg, roleUserSpaced)
}

var (
	roleUser       = []byte(`"role":"user"`)
	roleUserSpaced = []byte(`"role": "user"`)
)

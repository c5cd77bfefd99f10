package gateway

import "bytes"

// outputBoundKeys are the JSON keys by which OpenAI requests bound their output: chat
// completions' max_tokens and max_completion_tokens, responses' max_output_tokens.
var outputBoundKeys = [...][]byte{[]byte(`"max_tokens"`), []byte(`"max_completion_tokens"`), []byte(`"max_output_tokens"`)}

// maxOutputTokens is the least output bound a raw JSON request body names, or 0 when it
// names none: the size of the request's answer at most, for capacity_wait_order
// "shortest". Not a JSON parser: it finds each key followed by a colon and an unsigned
// integer; a key whose value is anything else (null, a string, an object of a nested
// schema) is skipped. A key cannot match inside a string value, where its quotes would
// be escaped. The result only orders waiting requests, so a bound in an unusual place
// costs at most a place in that order.
func maxOutputTokens(body []byte) uint64 {
	var least uint64
	for _, k := range outputBoundKeys {
		for rest := body; ; {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			rest = rest[i+len(k):]
			if v, ok := uintValue(rest); ok && v > 0 && (least == 0 || v < least) {
				least = v
			}
		}
	}
	return least
}

// uintValue reads `: <digits>` at the start of b (white space allowed around the colon),
// saturating at 1<<32 tokens.
func uintValue(b []byte) (uint64, bool) {
	i, ok := afterColon(b, 0)
	if !ok {
		return 0, false
	}
	var v uint64
	digits := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if v < 1<<32 {
			v = v*10 + uint64(b[i]-'0')
		}
		digits++
	}
	if digits == 0 || (i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E')) {
		return 0, false
	}
	return min(v, 1<<32), true
}

// afterColon skips the white space, the colon and the white space that follow a JSON
// object key ending before b[i]; it returns where the value starts, false when there is
// no colon.
func afterColon(b []byte, i int) (int, bool) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipSpace(b, i+1), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

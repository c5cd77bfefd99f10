// Package echo quotes client-sent values for error messages and logs, so that no answer
// ever repeats unbounded request bytes.
package echo

import (
	"strconv"
	"unicode/utf8"
)

// Max bounds the bytes of a client-sent value that a message may quote.
const Max = 64

// Quote quotes a client-sent value: at most Max bytes (cut on a rune boundary, "..."
// marking the cut), Go-quoted so control characters and invalid UTF-8 show as escapes.
func Quote[T ~string | ~[]byte](v T) string {
	s := string(v[:min(len(v), Max+1)])
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	cut := Max
	for cut > Max-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

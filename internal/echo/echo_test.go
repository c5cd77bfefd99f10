package echo_test

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/echo"
)

// Short values are quoted whole; long ones are cut to Max bytes on a rune boundary with a
// marker; control characters and invalid UTF-8 come out escaped.
func TestQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"model-a":                      `"model-a"`,
		"a\nb\x00":                     `"a\nb\x00"`,
		"\xff":                         `"\xff"`,
		strings.Repeat("x", echo.Max):  `"` + strings.Repeat("x", echo.Max) + `"`,
		strings.Repeat("x", 1000):      `"` + strings.Repeat("x", echo.Max) + `"...`,
		strings.Repeat("x", 63) + "é!": `"` + strings.Repeat("x", 63) + `"...`,
	} {
		if got := echo.Quote(in); got != want {
			t.Errorf("Quote(%.20q…) = %s, want %s", in, got, want)
		}
		if got := echo.Quote([]byte(in)); got != want {
			t.Errorf("Quote([]byte) differs from Quote(string) for %.20q…", in)
		}
	}
}

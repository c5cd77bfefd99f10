package gateway

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/echo"
)

// quoteClient quotes at most 64 bytes of a client value, never splitting a rune, and
// marks a cut.
func TestQuoteClient(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"m", `"m"`},
		{strings.Repeat("x", 64), `"` + strings.Repeat("x", 64) + `"`},
		{strings.Repeat("x", 65), `"` + strings.Repeat("x", 64) + `"...`},
		{"a\n\x00\"", `"a\n\x00\""`},
		{strings.Repeat("x", 63) + "€tail", `"` + strings.Repeat("x", 63) + `"...`}, // € is 3 bytes
		{strings.Repeat("x", 61) + "€tail", `"` + strings.Repeat("x", 61) + `€"...`},
		{strings.Repeat("\xff", 100), `"` + strings.Repeat(`\xff`, 64) + `"...`},
	} {
		if got := echo.Quote(tc.in); got != tc.want {
			t.Errorf("echo.Quote(%.80q) = %s, want %s", tc.in, got, tc.want)
		}
		if got := echo.Quote([]byte(tc.in)); got != tc.want {
			t.Errorf("echo.Quote([]byte(%.80q)) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

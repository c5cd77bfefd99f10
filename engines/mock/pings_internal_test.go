package mock

import (
	"log/slog"
	"strings"
	"testing"
)

// A bounded engine's pings name its concurrency per served model; with HideConcurrency
// (--no-advertise-concurrency) they are one bare ping, as an engine that does not report
// it, so its pylons publish the limit unknown.
func TestPingsAdvertiseConcurrencyUnlessHidden(t *testing.T) {
	for _, tc := range []struct {
		hide bool
		want string
	}{
		{false, `{"v":1,"type":"ping","model":"m","max_engine_concurrency":7}` + "\n"},
		{true, `{"v":1,"type":"ping"}` + "\n"},
	} {
		e, err := New(Config{ModelNames: []string{"m"}, MaxConcurrentRequests: 7, HideConcurrency: tc.hide, NumTokens: 1}, Deps{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(e.appendPings(nil)); got != tc.want {
			t.Errorf("hide %v: pings %q, want %q", tc.hide, strings.TrimSpace(got), strings.TrimSpace(tc.want))
		}
		_ = e.Close()
	}
}

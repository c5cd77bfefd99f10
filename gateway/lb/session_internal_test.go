package lb

import (
	"fmt"
	"testing"
	"time"
)

// The session table forgets the least recently used key first, forgets a key after its
// time to live, and updates a key in place.
func TestSessionTableLRUAndTTL(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	tb := newSessionTable(3, time.Minute)
	for i := range 3 {
		tb.put(fmt.Sprint("k", i), fmt.Sprint("c", i), at)
	}
	if _, ok := tb.get("k0", at); !ok {
		t.Fatal("k0 missing")
	}
	tb.put("k0", "c9", at) // k0 most recently used now
	tb.put("k3", "c3", at) // evicts k1, the least recently used
	if _, ok := tb.get("k1", at); ok {
		t.Error("k1 was not evicted")
	}
	for k, want := range map[string]string{"k0": "c9", "k2": "c2", "k3": "c3"} {
		if got, ok := tb.get(k, at); !ok || got != want {
			t.Errorf("%s = %q %v, want %q", k, got, ok, want)
		}
	}
	if tb.len() != 3 {
		t.Errorf("len %d, want 3", tb.len())
	}
	if _, ok := tb.get("k2", at.Add(61*time.Second)); ok {
		t.Error("k2 outlived its time to live")
	}
	if got, ok := tb.get("k2", at.Add(59*time.Second)); !ok || got != "c2" {
		t.Errorf("k2 within its time to live: %q %v", got, ok)
	}
}

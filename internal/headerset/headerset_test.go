package headerset_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/headerset"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// Lookup matches names ASCII case-insensitively, by exact length, and returns the index
// in the order the names were listed; names of equal length are told apart.
func TestLookup(t *testing.T) {
	s := headerset.New("x-model", "Connection", "x-request-id", "TE", "x-priority", "x-routing-key")
	for _, tc := range []struct {
		key  string
		want int // −1: not in the set
	}{
		{"x-model", 0},
		{"X-Model", 0},
		{"X-MODEL", 0},
		{"connection", 1},
		{"CONNECTION", 1},
		{"X-Request-Id", 2},
		{"x-request-ID", 2},
		{"te", 3},
		{"Te", 3},
		{"X-Priority", 4},
		{"x-routing-key", 5},
		{"x-routing-kez", -1}, // same length as x-routing-key and x-request-id
		{"x-models", -1},      // a listed name with more
		{"x-mode", -1},        // and with less
		{"", -1},
		{"t", -1},
		{"Content-Type", -1},
		{strings.Repeat("x", headerset.FastNameLen+1), -1}, // longer than any name can be
		{"x-model\x00", -1},
	} {
		i, ok := s.Lookup([]byte(tc.key))
		if got := map[bool]int{true: i, false: -1}[ok]; got != tc.want {
			t.Errorf("Lookup(%q) = %d, %v; want %d", tc.key, i, ok, tc.want)
		}
	}
	if s.Len() != 6 {
		t.Errorf("Len %d, want 6", s.Len())
	}
}

// Names are kept in fasthttp's canonical form, whatever the case they were listed in.
func TestCanonicalNames(t *testing.T) {
	s := headerset.New("x-request-id", "CONTENT-TYPE", "te", "X-Pylon-Load")
	for i, want := range []string{"X-Request-Id", "Content-Type", "Te", "X-Pylon-Load"} {
		if got := s.Name(i); got != want {
			t.Errorf("Name(%d) = %q, want %q", i, got, want)
		}
	}
	// Sent gives back the canonical string for a canonical key and the key itself
	// otherwise (what fasthttp's Del matches when normalizing is off).
	if got := s.Sent(0, []byte("X-Request-Id")); got != "X-Request-Id" {
		t.Errorf("Sent canonical = %q", got)
	}
	if got := s.Sent(0, []byte("x-REQUEST-id")); got != "x-REQUEST-id" {
		t.Errorf("Sent as sent = %q", got)
	}
}

// A set holds up to MaxNames names; the last name's bit is the top bit of a Mask. More
// names is a programming error (panic). A name longer than FastNameLen is matched too.
func TestBounds(t *testing.T) {
	names := make([]string, headerset.MaxNames, headerset.MaxNames+1)
	for i := range names {
		names[i] = fmt.Sprintf("x-h%02d", i) // all of length 5: every bit in one mask
	}
	names[len(names)-2] = "x-" + strings.Repeat("z", headerset.FastNameLen-2)          // the longest on the fast path
	names[len(names)-1] = "x-configured-" + strings.Repeat("y", headerset.FastNameLen) // a long one
	s := headerset.New(names...)
	for i, n := range names {
		if got, ok := s.Lookup([]byte(strings.ToUpper(n))); !ok || got != i {
			t.Errorf("%s: Lookup = %d, %v; want %d", n, got, ok, i)
		}
		if _, ok := s.Lookup([]byte(n + "-")); ok {
			t.Errorf("%s-: found", n)
		}
	}
	if _, ok := s.Lookup([]byte("x-configured-" + strings.Repeat("y", headerset.FastNameLen-1) + "z")); ok {
		t.Error("a long name of the same length matched")
	}
	var h fasthttp.RequestHeader
	h.Set(names[len(names)-1], "v")
	h.Set(names[0], "v")
	if m := s.Present(h.All()); m != 1|1<<31 {
		t.Errorf("Present = %b, want the first and the last bit", m)
	}
	defer func() {
		if recover() == nil {
			t.Error("New took 33 names")
		}
	}()
	headerset.New(append(names, "x-one-more")...)
}

// Strip removes every listed header whatever its case and whether the header normalizes
// names or not; Present and Delete remove the present ones by mask (normalizing on).
func TestStripAndDelete(t *testing.T) {
	s := headerset.New("x-internal", "Connection", "Keep-Alive", "TE")
	stripped := map[string]string{"X-INTERNAL": "1", "connection": "close", "Keep-Alive": "timeout=5", "te": "trailers"}
	kept := map[string]string{"X-Model": "m", "Content-Type": "application/json", "X-Internal-Not": "k"}
	check := func(name string, peek func(string) []byte) {
		t.Helper()
		for k := range stripped {
			if v := peek(k); v != nil {
				t.Errorf("%s: %s kept (%q)", name, k, v)
			}
		}
		for k, want := range kept {
			if got := string(peek(k)); got != want {
				t.Errorf("%s: %s = %q, want %q", name, k, got, want)
			}
		}
	}
	fill := func(set func(k, v string)) {
		for k, v := range stripped {
			set(k, v)
		}
		for k, v := range kept {
			set(k, v)
		}
	}
	for _, normalize := range []bool{true, false} {
		var req fasthttp.RequestHeader
		var resp fasthttp.ResponseHeader
		if !normalize {
			req.DisableNormalizing()
			resp.DisableNormalizing()
		}
		fill(req.Set)
		fill(resp.Set)
		s.StripRequest(&req)
		s.StripResponse(&resp)
		check(fmt.Sprintf("StripRequest normalize=%v", normalize), req.Peek)
		check(fmt.Sprintf("StripResponse normalize=%v", normalize), resp.Peek)
	}

	var req fasthttp.RequestHeader
	var resp fasthttp.ResponseHeader
	fill(req.Set)
	fill(resp.Set)
	if m := s.Present(req.All()); m != 0b1111 {
		t.Errorf("Present = %b, want every name", m)
	}
	s.DeleteRequest(&req, s.Present(req.All()))
	s.DeleteResponse(&resp, s.Present(resp.All()))
	check("DeleteRequest", req.Peek)
	check("DeleteResponse", resp.Peek)
	// Only the masked names go.
	req.Set("Connection", "close")
	req.Set("TE", "trailers")
	s.DeleteRequest(&req, 1<<3)
	if req.Peek("Connection") == nil || req.Peek("TE") != nil {
		t.Errorf("DeleteRequest of TE alone: %s", req.Header())
	}
}

// Matching, and stripping a header that holds none of the names, allocates nothing.
func TestLookupAndStripAllocatesNothing(t *testing.T) {
	if mocktest.RaceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	s := headerset.New("x-internal", "Connection", "Keep-Alive", "TE")
	var h fasthttp.RequestHeader
	h.Set("X-Model", "m")
	h.Set("Content-Type", "application/json")
	h.Set("Te", "trailers")
	key := []byte("CONNECTION")
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := s.Lookup(key); !ok {
			t.Fatal("no match")
		}
		h.Set("Te", "trailers")
		s.StripRequest(&h)
		s.DeleteRequest(&h, s.Present(h.All()))
	}); n != 0 {
		t.Errorf("%v allocations per run, want 0", n)
	}
}

// BenchmarkLookup is a typical request's header names against a 21-name list (the
// gateway's request strip), none of them in it.
func BenchmarkLookup(b *testing.B) {
	names := []string{
		"x-routing-method", "x-stargate-retryable", "x-stargate-retry-reason", "x-stargate-retry-after-ms",
		"x-stargate-expected-queue-ms", "x-stargate-error-code", "x-switchyard-dispatch-seq", "x-pylon-load",
		"x-stargate-upstream-retryable", "x-stargate-cluster-id", "x-inference-server-id", "x-inference-server-url",
		"x-stargate-last-cluster-id", "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Upgrade",
	}
	s := headerset.New(names...)
	keys := [][]byte{
		[]byte("Host"), []byte("User-Agent"), []byte("Accept"), []byte("Content-Type"), []byte("Authorization"),
		[]byte("X-Model"), []byte("X-Request-Id"), []byte("X-Input-Tokens"), []byte("Accept-Encoding"),
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, k := range keys {
			if _, ok := s.Lookup(k); ok {
				b.Fatal(string(k))
			}
		}
	}
}

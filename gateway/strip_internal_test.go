package gateway

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/wire"
)

// Hop-by-hop and gateway-internal headers are stripped from requests before a pylon,
// whatever their case; every other header is forwarded.
func TestStripRequest(t *testing.T) {
	for _, normalize := range []bool{true, false} {
		var h fasthttp.RequestHeader
		h.DisableNormalizing()
		if normalize {
			h.EnableNormalizing()
		}
		h.SetMethod("POST")
		h.SetRequestURI("/v1/chat/completions")
		stripped := map[string]string{
			"X-Routing-Method": "lb", "x-stargate-retryable": "true", "X-STARGATE-RETRY-REASON": "r",
			"x-stargate-retry-after-ms": "5", "X-Stargate-Expected-Queue-Ms": "9", "x-stargate-error-code": "e",
			"X-Switchyard-Dispatch-Seq": "g/1", "x-pylon-load": "v=1", "Keep-Alive": "timeout=5",
			"proxy-authorization": "Basic x", "Proxy-Authenticate": "Basic", "Proxy-Connection": "keep-alive",
			"TE": "trailers", "Trailer": "X-Foo", "upgrade": "h2c",
		}
		kept := map[string]string{
			"X-Model": "m", "x-input-tokens": "3", "Authorization": "Bearer t", "User-Agent": "ua",
			"X-Request-Id": "r1", "X-Custom": "c", "Accept": "*/*", "Content-Type": "application/json",
		}
		for k, v := range stripped {
			h.Set(k, v)
		}
		for k, v := range kept {
			h.Set(k, v)
		}
		stripRequest(&h)
		for k := range stripped {
			if v := h.Peek(k); v != nil {
				t.Errorf("normalize=%v: %s was forwarded (%q)", normalize, k, v)
			}
		}
		for k, want := range kept {
			if got := string(h.Peek(k)); got != want {
				t.Errorf("normalize=%v: %s = %q, want %q forwarded", normalize, k, got, want)
			}
		}
	}
}

// One pass over a pylon's response headers finds the load report and strips the
// internal and hop-by-hop ones; the rest reach the client.
func TestResponseScan(t *testing.T) {
	var h fasthttp.ResponseHeader
	h.Set(wire.HeaderPylonLoad, "v=1;m=m")
	h.Set("X-Stargate-Retryable", "true")
	h.Set(wire.HeaderRetryReason, "upstream_admission")
	h.Set(wire.HeaderRetryAfterMs, "10")
	h.Set(wire.HeaderExpectedQueueMs, "3")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("Trailer", "X-Foo")
	h.Set("X-Request-Id", "r1")
	h.Set("X-Custom", "c")
	h.SetContentType("application/json")
	var rs responseScan
	rs.scan(&h)
	if string(rs.load) != "v=1;m=m" {
		t.Errorf("load report %q, want the x-pylon-load value", rs.load)
	}
	rs.strip(&h)
	for _, k := range []string{wire.HeaderPylonLoad, wire.HeaderRetryable, wire.HeaderRetryReason, wire.HeaderRetryAfterMs, wire.HeaderExpectedQueueMs, "Keep-Alive", "Trailer"} {
		if v := h.Peek(k); v != nil {
			t.Errorf("%s reached the client (%q)", k, v)
		}
	}
	for k, want := range map[string]string{"X-Request-Id": "r1", "X-Custom": "c", "Content-Type": "application/json"} {
		if got := string(h.Peek(k)); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// stripBenchRequest is a typical OpenAI client request as the gateway's server hands it
// over (names normalized): no hop-by-hop or internal header but Connection.
func stripBenchRequest() *fasthttp.RequestHeader {
	var h fasthttp.RequestHeader
	h.SetMethod("POST")
	h.SetRequestURI("/v1/chat/completions")
	for _, kv := range [][2]string{
		{"Host", "gateway:8000"},
		{"User-Agent", "OpenAI/Python 1.54.0"},
		{"Accept", "application/json"},
		{"Content-Type", "application/json"},
		{"Authorization", "Bearer sk-test"},
		{"X-Model", "m"},
		{"X-Request-Id", "r1"},
		{"X-Input-Tokens", "512"},
		{"X-Stainless-Lang", "python"},
		{"X-Stainless-Runtime", "CPython"},
		{"Accept-Encoding", "gzip, deflate"},
	} {
		h.Set(kv[0], kv[1])
	}
	return &h
}

// BenchmarkStripRequest is the per-attempt scan of a request's headers for the names the
// gateway strips before a pylon (none present, the common case).
func BenchmarkStripRequest(b *testing.B) {
	h := stripBenchRequest()
	b.ReportAllocs()
	for b.Loop() {
		stripRequest(h)
	}
}

// BenchmarkResponseScan is the per-attempt scan of a pylon response for its load report
// and the internal headers stripped before the client (the report is always there).
func BenchmarkResponseScan(b *testing.B) {
	var h fasthttp.ResponseHeader
	h.SetContentType("text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Request-Id", "r1")
	h.Set("Date", "Fri, 04 Dec 2026 18:00:00 GMT")
	b.ReportAllocs()
	for b.Loop() {
		h.Set(wire.HeaderPylonLoad, "v=1;m=m;q=2;tps=100;seq=7")
		var rs responseScan
		rs.scan(&h)
		rs.strip(&h)
	}
}

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

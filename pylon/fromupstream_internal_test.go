package pylon

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/wire"
)

// An engine response passes the pylon's one header pass: a 429/503 flagged by the
// engine's retry header (any case; a configured name longer than the fast path's names
// too) becomes retryable with reason upstream_admission_rejected and Retry-After in ms;
// without the flag it stays final; the engine's retry header, any retry signalling of
// ours it echoed and the hop-by-hop headers are removed; the rest is forwarded.
func TestFromUpstream(t *testing.T) {
	long := "x-engine-says-this-request-may-be-retried-elsewhere" // over 32 bytes
	for _, tc := range []struct {
		name, retryHeader, sentAs string
		status                    int
		flag                      string
		wantRetryable             bool
	}{
		{"flagged 429", wire.HeaderUpstreamRetryable, "X-Stargate-Upstream-Retryable", 429, "true", true},
		{"flagged 503, odd case", wire.HeaderUpstreamRetryable, "x-STARGATE-upstream-retryable", 503, " TRUE ", true},
		{"flagged, long configured name", long, strings.ToUpper(long), 503, "true", true},
		{"not flagged", wire.HeaderUpstreamRetryable, "X-Stargate-Upstream-Retryable", 429, "false", false},
		{"flagged but not a retryable status", wire.HeaderUpstreamRetryable, "X-Stargate-Upstream-Retryable", 500, "true", false},
	} {
		cfg := DefaultConfig()
		cfg.UpstreamRetryHeader = tc.retryHeader
		p := &Pylon{cfg: cfg, fromEngine: fromEngineSet(tc.retryHeader), metrics: newPylonMetrics("pylon_", "p1", "v1", false)}
		var h fasthttp.ResponseHeader
		h.SetStatusCode(tc.status)
		h.Set(tc.sentAs, tc.flag)
		h.Set("Retry-After", "2")
		h.Set("Connection", "keep-alive")
		h.Set("Keep-Alive", "timeout=5")
		h.Set(wire.HeaderRetryReason, "echoed")
		h.Set("X-Engine-Header", "kept")
		p.fromUpstream(&h)
		if h.Peek(tc.sentAs) != nil || h.Peek("Keep-Alive") != nil {
			t.Errorf("%s: forwarded the engine's retry header or a hop-by-hop one:\n%s", tc.name, h.Header())
		}
		if string(h.Peek("X-Engine-Header")) != "kept" || string(h.Peek("Retry-After")) != "2" {
			t.Errorf("%s: dropped an engine header:\n%s", tc.name, h.Header())
		}
		retryable, reason, after := string(h.Peek(wire.HeaderRetryable)), string(h.Peek(wire.HeaderRetryReason)), string(h.Peek(wire.HeaderRetryAfterMs))
		if tc.wantRetryable {
			if retryable != "true" || reason != wire.RetryUpstreamAdmission || after != "2000" {
				t.Errorf("%s: retryable %q reason %q after %q; want true, %s, 2000", tc.name, retryable, reason, after, wire.RetryUpstreamAdmission)
			}
		} else if retryable != "" || reason != "" || after != "" {
			t.Errorf("%s: retryable %q reason %q after %q; want no retry signal", tc.name, retryable, reason, after)
		}
	}
}

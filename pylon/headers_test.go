package pylon

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/headerset"
	"github.com/switchyard/switchyard/internal/wire"
)

// One pass finds every data-path header (any case, the first of repeated ones), tells a
// present empty value from an absent one, and marks exactly the toEngine names present.
func TestDataHeadersOnePass(t *testing.T) {
	var h fasthttp.RequestHeader
	h.Set("X-REQUEST-ID", "r1")
	h.Add("x-request-id", "r2")
	h.Set("x-model", "m")
	h.Set("X-Input-Tokens", "")
	h.Set("x-priority", "4")
	h.Set(wire.HeaderDispatchSeq, "gw/7")
	h.Set(wire.HeaderPrefillTokens, "120")
	h.Set(wire.HeaderConversation, "conversation-1f")
	h.Set(wire.HeaderCacheAffinityKey, "session-7")
	h.Set("Connection", "keep-alive")
	h.Set("Content-Type", "application/json")
	var d dataHeaders
	d.collect(&h)
	if string(d.requestID) != "r1" || string(d.model) != "m" || string(d.priority) != "4" || string(d.seq) != "gw/7" || string(d.prefill) != "120" {
		t.Errorf("values: id %q model %q priority %q seq %q", d.requestID, d.model, d.priority, d.seq)
	}
	if string(d.conversation) != "conversation-1f" || string(d.affinityKey) != "session-7" {
		t.Errorf("conversation %q, affinity key %q", d.conversation, d.affinityKey)
	}
	if d.inputTokens == nil || len(d.inputTokens) != 0 {
		t.Errorf("present empty x-input-tokens read as %#v", d.inputTokens)
	}
	if d.expected != nil {
		t.Errorf("absent expected queue read as %q", d.expected)
	}
	conn, _ := toEngine.Lookup([]byte("Connection"))
	want := headerset.Mask(1)<<toEngineSeq | headerset.Mask(1)<<toEnginePrefill | headerset.Mask(1)<<toEngineConv | headerset.Mask(1)<<conn
	if d.strip != want {
		t.Errorf("strip mask %b, want %b", d.strip, want)
	}
	toEngine.DeleteRequest(&h, d.strip)
	if h.Peek(wire.HeaderDispatchSeq) != nil || h.Peek(wire.HeaderPrefillTokens) != nil || h.Peek(wire.HeaderConversation) != nil || h.Peek("Connection") != nil || h.Peek("x-priority") == nil || h.Peek(wire.HeaderCacheAffinityKey) == nil {
		t.Errorf("after strip: %s", h.Header())
	}
}

// BenchmarkDataHeaders is the pylon's one pass over a gateway request's headers: the
// data-path values and the toEngine names to strip, then their deletion.
func BenchmarkDataHeaders(b *testing.B) {
	var h fasthttp.RequestHeader
	for _, kv := range [][2]string{
		{"Host", "pylon:8100"},
		{"User-Agent", "OpenAI/Python 1.54.0"},
		{"Content-Type", "application/json"},
		{"Authorization", "Bearer sk-test"},
		{"X-Model", "m"},
		{"X-Request-Id", "r1"},
		{"X-Input-Tokens", "512"},
		{"X-Inference-Server-Id", "p1"},
		{"X-Stargate-Cluster-Id", "c1"},
	} {
		h.Set(kv[0], kv[1])
	}
	b.ReportAllocs()
	for b.Loop() {
		h.Set(wire.HeaderExpectedQueueMs, "12")
		h.Set(wire.HeaderDispatchSeq, "gw/7")
		var d dataHeaders
		d.collect(&h)
		toEngine.DeleteRequest(&h, d.strip)
	}
}

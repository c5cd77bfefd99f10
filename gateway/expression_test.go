package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/switchyard/switchyard/gateway"
)

// A routing expression overrides the method's settings for one request: here
// require_cache_affinity_key, so the same request without the key is refused and with it
// is served. Parsed expressions are remembered per target (cache hit after the first) and
// counted.
func TestRoutingExpression(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"power-of-n","request_algorithms":{"wait-and-widen":{"algorithm":"wait-and-widen","cache_affinity_backend_selection_count":1}}}`)
		h.register(h.pylon("a", "a", idleLoad(), nil))
		h.register(h.pylon("b", "b", idleLoad(), nil))
		expr := "wait-and-widen;require_cache_affinity_key;n=3"
		if r := h.chat(map[string]string{"x-routing-method": "wait-and-widen"}); r.status != 200 {
			t.Fatalf("plain method without a key: %d %s", r.status, r.body)
		}
		if r := h.chat(map[string]string{"x-routing-method": expr}); r.status != 400 || !strings.Contains(r.body, "x-cache-affinity-key") {
			t.Errorf("expression requiring the key, sent without: %d %s", r.status, r.body)
		}
		for range 3 {
			if r := h.chat(map[string]string{"x-routing-method": expr, "x-cache-affinity-key": "k"}); r.status != 200 {
				t.Fatalf("expression with the key: %d %s", r.status, r.body)
			}
		}
		if v := h.scrapeMetric(`switchyard_routing_expressions_total{algorithm="wait-and-widen",cache="miss"}`); v != "1" {
			t.Errorf("misses %q, want 1 (parsed once)", v)
		}
		if v := h.scrapeMetric(`switchyard_routing_expressions_total{algorithm="wait-and-widen",cache="hit"}`); v != "3" {
			t.Errorf("hits %q, want 3", v)
		}
		if v := h.scrapeMetric(`switchyard_routing_expression_cache_entries`); v != "1" {
			t.Errorf("cache entries %q, want 1", v)
		}
	})
}

// A refused expression is a 400 before routing whose code (body and
// x-stargate-error-code) is the refusal's class and whose message names the parameter.
func TestRoutingExpressionRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"power-of-n","request_algorithms":{"wait-and-widen":"wait-and-widen"}}`)
		p := h.pylon("a", "a", idleLoad(), nil)
		h.register(p)
		tests := []struct{ expr, code, names string }{
			{"wait-and-widen;colour=blue", "unknown_parameter", "colour"},
			{"wait-and-widen;sample_count=4", "not_applicable", "sample_count"},
			{"wait-and-widen;n=-2", "invalid_value", "n"},
			{"wait-and-widen;n=2", "inert_value", "n"},
			{"wait-and-widen;cache_affinity_wait_ms=100", "inert_combination", "cache_affinity_backend_selection_count"},
			{"wait-and-widen;n=2,random", "malformed_expression", "list"},
			{"sticky;n=2", "unknown_method", "sticky"},
			{"random;n=2", "unavailable", "random"},
		}
		for _, tt := range tests {
			r := h.chat(map[string]string{"x-routing-method": tt.expr})
			var body struct {
				Error struct{ Message, Code string } `json:"error"`
			}
			_ = json.Unmarshal([]byte(r.body), &body)
			if r.status != 400 || r.headers["X-Stargate-Error-Code"] != tt.code || body.Error.Code != tt.code || !strings.Contains(body.Error.Message, tt.names) {
				t.Errorf("%q: %d %q %s; want 400 %s naming %s", tt.expr, r.status, r.headers["X-Stargate-Error-Code"], r.body, tt.code, tt.names)
			}
		}
		p.mu.Lock()
		calls := p.calls
		p.mu.Unlock()
		if calls != 0 {
			t.Errorf("%d refused requests reached the pylon", calls)
		}
	})
}

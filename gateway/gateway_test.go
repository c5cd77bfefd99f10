package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

func idleLoad() load.Load { return load.Load{InputTPS: 1000, MaxEngineConcurrency: 8} }

// Plain OpenAI clients: no routing headers at all.
func TestPlainOpenAIClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		p := h.pylon("p1", "c1", idleLoad(), nil)
		h.register(p)
		r := h.chat(nil)
		if r.status != 200 || !strings.Contains(r.body, "p1") {
			t.Fatalf("plain request: %d %s", r.status, r.body)
		}
		for k, want := range map[string]string{"X-Inference-Server-Id": "p1", "X-Inference-Server-Url": "http://p1:80", "X-Stargate-Cluster-Id": "c1"} {
			if r.headers[k] != want {
				t.Errorf("response header %s = %q, want %q", k, r.headers[k], want)
			}
		}
		if _, ok := r.headers["X-Pylon-Load"]; ok {
			t.Error("internal x-pylon-load leaked to the client")
		}
		if p.header("X-Model") != "m" || p.header("X-Input-Tokens") == "" || !strings.HasPrefix(p.header("X-Request-Id"), "gw-test-") {
			t.Errorf("synthesised routing headers: %v", p.lastHeaders)
		}
		if p.header("X-Switchyard-Dispatch-Seq") != "gw-test/1" || p.header("X-Stargate-Expected-Queue-Ms") != "0" {
			t.Errorf("dispatch headers: %v", p.lastHeaders)
		}
	})
}

// Header contract violations answer 400 with a JSON body naming the header; unknown models
// 404 no_eligible_candidates; oversize bodies 413.
func TestFrontEndErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MaxReplayBodyBytes: 1024}, "")
		h.register(h.pylon("p1", "c1", idleLoad(), nil))
		for _, tt := range []struct {
			name    string
			headers map[string]string
			body    string
			status  int
			mention string
		}{
			{"bad input tokens", map[string]string{"x-input-tokens": "ten"}, "", 400, "x-input-tokens"},
			{"bad priority", map[string]string{"x-priority": "-1"}, "", 400, "x-priority"},
			{"blank request id", map[string]string{"x-request-id": " "}, "", 400, "x-request-id"},
			{"unknown routing method", map[string]string{"x-routing-method": "sticky"}, "", 400, "x-routing-method"},
			{"not JSON without headers", nil, "not json", 400, "JSON"},
			{"unknown model", map[string]string{"x-model": "nope", "x-input-tokens": "1"}, "", 404, "no eligible candidates"},
			{"too large", map[string]string{"x-model": "m", "x-input-tokens": "1"}, strings.Repeat("x", 2000), 413, "replay limit"},
		} {
			body := tt.body
			if body == "" {
				body = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			}
			r := h.do("POST", "/v1/chat/completions", []byte(body), tt.headers)
			if r.status != tt.status || !strings.Contains(r.body, tt.mention) || !strings.Contains(r.body, `"error"`) {
				t.Errorf("%s: %d %s, want %d mentioning %q", tt.name, r.status, r.body, tt.status, tt.mention)
			}
		}
		if r := h.do("GET", "/v1/chat/completions", nil, nil); r.status != 405 {
			t.Errorf("GET on an inference path: %d", r.status)
		}
		if r := h.chat(map[string]string{"x-model": "nope", "x-input-tokens": "1"}); r.headers["X-Stargate-Error-Code"] != "no_eligible_candidates" {
			t.Errorf("404 without x-stargate-error-code: %v", r.headers)
		}
	})
}

// require_cache_affinity_key → 400 without the header, 200 with it.
func TestRequireCacheAffinityKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"power-of-n","models":{"m":{"algorithm":"wait-and-widen","require_cache_affinity_key":true}}}`)
		h.register(h.pylon("p1", "c1", idleLoad(), nil))
		if r := h.chat(nil); r.status != 400 || !strings.Contains(r.body, "x-cache-affinity-key") {
			t.Errorf("without the key: %d %s", r.status, r.body)
		}
		if r := h.chat(map[string]string{"x-cache-affinity-key": "k"}); r.status != 200 {
			t.Errorf("with the key: %d %s", r.status, r.body)
		}
	})
}

// A retryable queue_estimate_mismatch goes to a sibling of the same cluster first; any
// other retryable reason excludes the cluster.
func TestRetryOnPylonSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		reject := func(reason string) func(int, *fasthttp.RequestCtx) {
			return func(_ int, ctx *fasthttp.RequestCtx) {
				ctx.SetStatusCode(429)
				ctx.Response.Header.Set(wire.HeaderRetryable, "true")
				ctx.Response.Header.Set(wire.HeaderRetryReason, reason)
				ctx.SetBodyString(`{"title":"Too Many Requests"}`)
			}
		}
		a1 := h.pylon("a1", "a", idleLoad(), reject(wire.RetryQueueEstimateMismatch))
		a2 := h.pylon("a2", "a", idleLoad(), nil)
		b1 := h.pylon("b1", "b", idleLoad(), nil)
		for _, p := range []*fakePylon{a1, a2, b1} {
			h.register(p)
		}
		// Round-robin starts at cluster a; backend RR inside a starts at a1.
		r := h.chat(nil)
		if r.status != 200 || r.headers["X-Inference-Server-Id"] != "a2" {
			t.Fatalf("mismatch retry: %d %v %s, want a2 (sibling)", r.status, r.headers["X-Inference-Server-Id"], r.body)
		}
		if _, ok := r.headers["X-Stargate-Retryable"]; ok {
			t.Error("retry metadata leaked to the client")
		}

		h2 := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		c1 := h2.pylon("c1", "c", idleLoad(), reject(wire.RetryUpstreamAdmission))
		c2 := h2.pylon("c2", "c", idleLoad(), nil)
		d1 := h2.pylon("d1", "d", idleLoad(), nil)
		for _, p := range []*fakePylon{c1, c2, d1} {
			h2.register(p)
		}
		r = h2.chat(nil)
		if r.status != 200 || r.headers["X-Inference-Server-Id"] != "d1" {
			t.Fatalf("admission retry: %d %v, want d1 (another cluster)", r.status, r.headers["X-Inference-Server-Id"])
		}
	})
}

// The last request retry after a queue refusal goes without an expected queue, so a pylon
// that refuses every request it is told to expect no queue for lets it in: the client gets
// an answer, not the refusal.
func TestLastQueueRetryUnchecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MaxRequestRetries: 1}, `{"default":"round-robin"}`)
		strict := func(_ int, ctx *fasthttp.RequestCtx) {
			if len(ctx.Request.Header.Peek(wire.HeaderExpectedQueueMs)) == 0 {
				ctx.SetBodyString(`{"choices":[]}`)
				return
			}
			ctx.SetStatusCode(429)
			ctx.Response.Header.Set(wire.HeaderRetryable, "true")
			ctx.Response.Header.Set(wire.HeaderRetryReason, wire.RetryQueueEstimateMismatch)
			ctx.SetBodyString(`{"title":"Too Many Requests"}`)
		}
		for _, id := range []string{"x", "y"} {
			h.register(h.pylon(id, id, idleLoad(), strict))
		}
		if r := h.chat(nil); r.status != 200 {
			t.Errorf("after one queue refusal, the last retry: %d %s, want 200", r.status, r.body)
		}
	})
}

// Exhausted retries pass the last upstream response through (metadata stripped).
func TestRetriesExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MaxRequestRetries: 1}, "")
		busy := func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(503)
			ctx.Response.Header.Set(wire.HeaderRetryable, "true")
			ctx.Response.Header.Set(wire.HeaderRetryReason, wire.RetryUpstreamAdmission)
			ctx.SetBodyString(`{"busy":true}`)
		}
		for _, id := range []string{"x", "y", "z"} {
			h.register(h.pylon(id, id, idleLoad(), busy))
		}
		r := h.chat(nil)
		if r.status != 503 || !strings.Contains(r.body, "busy") || r.headers["X-Stargate-Retry-Reason"] != "" {
			t.Errorf("exhausted: %d %s %v", r.status, r.body, r.headers)
		}
	})
}

// A backend without capacity makes wait-and-widen park the request until the slow backend's
// bucket unlocks (on virtual time, through the whole gateway).
func TestWaitThroughGateway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"wait-and-widen"}`)
		h.register(h.pylon("fast", "fast", load.Load{InputTPS: 20_000, RunningRequests: 4, MaxEngineConcurrency: 4}, nil))
		h.register(h.pylon("slow", "slow", load.Load{InputTPS: 5000, MaxEngineConcurrency: 4}, nil))
		start := time.Now()
		r := h.chat(map[string]string{"x-input-tokens": "4000"})
		if r.status != 200 || r.headers["X-Inference-Server-Id"] != "slow" {
			t.Fatalf("got %d from %s", r.status, r.headers["X-Inference-Server-Id"])
		}
		if got := time.Since(start); got < 100*time.Millisecond || got > 160*time.Millisecond {
			t.Errorf("time to headers %v, want ≈150ms (≥100ms)", got)
		}
	})
}

// Control endpoint: bearer token, immutability (409), deregistration.
func TestControlEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{ControlToken: "s3cret"}, "")
		body := `{"inference_server_id":"p1","inference_server_url":"http://p1:80","models":{"m":{"status":"ACTIVE","stats":{}}}}`
		if r := h.do("PUT", wire.RegistrationPath+"p1", []byte(body), nil); r.status != 401 {
			t.Errorf("no token: %d", r.status)
		}
		auth := map[string]string{"Authorization": "Bearer s3cret"}
		if r := h.do("PUT", wire.RegistrationPath+"p1", []byte(body), auth); r.status != 200 || !strings.Contains(r.body, "gw-test") {
			t.Errorf("register: %d %s", r.status, r.body)
		}
		moved := strings.Replace(body, "p1:80", "p1:81", 1)
		if r := h.do("PUT", wire.RegistrationPath+"p1", []byte(moved), auth); r.status != 409 {
			t.Errorf("changed URL on a live registration: %d %s", r.status, r.body)
		}
		if r := h.do("PUT", wire.RegistrationPath+"p1", []byte(`{"bogus":1}`), auth); r.status != 400 {
			t.Errorf("bad registration: %d %s", r.status, r.body)
		}
		if r := h.do("DELETE", wire.RegistrationPath+"p1", nil, auth); r.status != 204 {
			t.Errorf("deregister: %d", r.status)
		}
		synctest.Wait()
		if r := h.do("DELETE", wire.RegistrationPath+"p1", nil, auth); r.status != 404 {
			t.Errorf("deregister twice: %d", r.status)
		}
	})
}

// A backend that stops sending heartbeats expires after 3 of them.
func TestBackendExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MinExpiry: time.Millisecond}, "")
		p := h.pylon("p1", "c1", idleLoad(), nil)
		body := `{"inference_server_id":"p1","inference_server_url":"http://p1:80","heartbeat_ms":100,"models":{"m":{"status":"ACTIVE","stats":{"last_mean_input_tps":1000}}}}`
		if r := h.do("PUT", wire.RegistrationPath+"p1", []byte(body), nil); r.status != 200 {
			t.Fatal(r.body)
		}
		_ = p
		synctest.Wait()
		if r := h.chat(nil); r.status != 200 {
			t.Fatalf("before expiry: %d %s", r.status, r.body)
		}
		time.Sleep(301 * time.Millisecond)
		synctest.Wait()
		if r := h.chat(nil); r.status != 404 {
			t.Errorf("after 3 missed heartbeats: %d %s", r.status, r.body)
		}
	})
}

// The affinity hold X = 100 ms through the whole gateway: a key sticks to its primary, and
// once the primary is full a request goes elsewhere only after the hold.
func TestAffinityHoldThroughGateway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"power-of-n","models":{"m":{"algorithm":"wait-and-widen","cache_affinity_virtual_nodes":8,"cache_affinity_backend_selection_count":1,"cache_affinity_wait_ms":100,"n":3}}}`)
		ps := map[string]*fakePylon{}
		for _, id := range []string{"p1", "p2", "p3"} {
			ps[id] = h.pylon(id, id, idleLoad(), nil)
			h.register(ps[id])
		}
		key := map[string]string{"x-cache-affinity-key": "session-7", "x-input-tokens": "100"}
		primary := ""
		for i := range 20 {
			r := h.chat(key)
			if r.status != 200 {
				t.Fatalf("request %d: %d %s", i, r.status, r.body)
			}
			if primary == "" {
				primary = r.headers["X-Inference-Server-Id"]
			}
			if got := r.headers["X-Inference-Server-Id"]; got != primary {
				t.Fatalf("request %d went to %s, not the primary %s", i, got, primary)
			}
		}
		// The primary becomes full. First let the last answer's deferred load report (idle)
		// land, so it cannot arrive after the registration that makes the primary full.
		synctest.Wait()
		full := idleLoad()
		full.RunningRequests = full.MaxEngineConcurrency
		ps[primary].mu.Lock()
		ps[primary].load = full
		ps[primary].mu.Unlock()
		h.register(ps[primary])

		start := time.Now()
		r := h.chat(key)
		if r.status != 200 || r.headers["X-Inference-Server-Id"] == primary {
			t.Fatalf("full primary: %d from %s", r.status, r.headers["X-Inference-Server-Id"])
		}
		if got := time.Since(start); got < 100*time.Millisecond {
			t.Errorf("fallback after %v, want ≥ 100ms", got)
		}
		with := func(extra map[string]string) map[string]string {
			m := map[string]string{}
			for k, v := range key {
				m[k] = v
			}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		if r := h.chat(with(map[string]string{"x-max-wait-ms": "10"})); r.status != 503 {
			t.Errorf("x-max-wait-ms 10 before X: %d %s", r.status, r.body)
		}
		start = time.Now()
		r = h.chat(with(map[string]string{"x-max-wait-ms": "500", "x-request-slo-ms": "5000"}))
		if r.status != 200 || r.headers["X-Inference-Server-Id"] == primary || time.Since(start) < 100*time.Millisecond {
			t.Errorf("x-max-wait-ms 500: %d from %s after %v", r.status, r.headers["X-Inference-Server-Id"], time.Since(start))
		}
	})
}

// Hot reload: an invalid file is rejected and the old configuration kept.
func TestLBConfigReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		strict := `{"default":"wait-and-widen","models":{"m":{"algorithm":"wait-and-widen","require_cache_affinity_key":true}}}`
		h := newHarness(t, gateway.Config{}, strict)
		h.register(h.pylon("p1", "c1", idleLoad(), nil))
		path := h.g.Config().LBConfigPath
		if r := h.chat(nil); r.status != 400 {
			t.Fatalf("strict config: %d", r.status)
		}
		if err := os.WriteFile(path, []byte(`{"default":"nope"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := h.g.Reload(); err == nil {
			t.Error("an invalid file was accepted")
		}
		if r := h.chat(nil); r.status != 400 {
			t.Errorf("the old config must stay: %d", r.status)
		}
		if err := os.WriteFile(path, []byte(`{"default":"round-robin"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := h.g.Reload(); err != nil {
			t.Fatal(err)
		}
		if r := h.chat(nil); r.status != 200 {
			t.Errorf("after a valid reload: %d %s", r.status, r.body)
		}
		m := h.do("GET", "/metrics", nil, nil).body
		for _, want := range []string{`switchyard_lb_config_reloads_total{result="rejected"} 1`, `switchyard_lb_config_reloads_total{result="applied"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

// /debug/state, /v1/models, /readyz and /metrics reflect the fleet.
func TestOperationalEndpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		if r := h.do("GET", "/readyz", nil, nil); r.status != 503 || !strings.Contains(r.body, "no_routable_backend") {
			t.Errorf("/readyz with no backend: %d %s, want 503", r.status, r.body)
		}
		h.register(h.pylon("p1", "c1", idleLoad(), nil))
		if r := h.chat(nil); r.status != 200 {
			t.Fatal(r.body)
		}
		var st struct {
			GatewayID string `json:"gateway_id"`
			Backends  []struct {
				ID       string `json:"id"`
				Routable bool   `json:"routable"`
			} `json:"backends"`
			Targets []struct {
				Model  string `json:"model"`
				Parked int    `json:"parked"`
			} `json:"targets"`
		}
		if err := json.Unmarshal([]byte(h.do("GET", "/debug/state", nil, nil).body), &st); err != nil {
			t.Fatal(err)
		}
		if st.GatewayID != "gw-test" || len(st.Backends) != 1 || !st.Backends[0].Routable || len(st.Targets) != 1 || st.Targets[0].Model != "m" {
			t.Errorf("debug state: %+v", st)
		}
		if r := h.do("GET", "/v1/models", nil, nil); !strings.Contains(r.body, `"id":"m"`) {
			t.Errorf("/v1/models: %s", r.body)
		}
		if r := h.do("GET", "/readyz", nil, nil); r.status != 200 {
			t.Errorf("/readyz: %d", r.status)
		}
		m := h.do("GET", "/metrics", nil, nil).body
		for _, want := range []string{
			`switchyard_requests_total{routing_key="",model="m",inference_server_id="p1",status="200"} 1`,
			`switchyard_routing_selections_total{routing_key="",model="m",algorithm="power-of-n",selection="primary"} 1`,
			`switchyard_active_inference_servers{routing_key="",model="m"} 1`,
			"\ngo_goroutines ", "\ngo_memstats_heap_inuse_bytes ", "\nprocess_resident_memory_bytes ", "\nprocess_open_fds ",
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

// A very short heartbeat does not expire a backend sooner than MinExpiry (default 3 s).
func TestBackendMinExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		h.pylon("p1", "c1", idleLoad(), nil)
		body := `{"inference_server_id":"p1","inference_server_url":"http://p1:80","heartbeat_ms":100,"models":{"m":{"status":"ACTIVE","stats":{"last_mean_input_tps":1000}}}}`
		if r := h.do("PUT", wire.RegistrationPath+"p1", []byte(body), nil); r.status != 200 {
			t.Fatal(r.body)
		}
		time.Sleep(2999 * time.Millisecond)
		synctest.Wait()
		if r := h.chat(nil); r.status != 200 {
			t.Fatalf("before 3 s: %d %s", r.status, r.body)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if r := h.chat(nil); r.status != 404 {
			t.Errorf("after 3 s: %d %s", r.status, r.body)
		}
	})
}

// The headers timeout bounds only the wait for a pylon's first response bytes: a stream
// that runs for longer than the timeout is relayed whole, while a pylon that sends
// nothing within it fails the attempt with 502.
func TestHeadersTimeoutCoversOnlyTheWaitForHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{HeadersTimeout: time.Second, MaxConnectRetries: -1}, "")
		streaming := func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				for i := range 4 {
					fmt.Fprintf(w, "data: {\"chunk\":%d}\n\n", i)
					_ = w.Flush()
					time.Sleep(time.Second) // 4 s in all, four times the headers timeout
				}
				fmt.Fprint(w, "data: [DONE]\n\n")
			})
		}
		h.register(h.pylon("s", "s", idleLoad(), streaming))
		start := time.Now()
		r := h.do("POST", "/v1/chat/completions", []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`), nil)
		if r.status != 200 || strings.Count(r.body, "data: ") != 5 || !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
			t.Fatalf("long stream: %d %q", r.status, r.body)
		}
		if got := time.Since(start); got != 4*time.Second {
			t.Errorf("stream took %v, want 4s", got)
		}

		h2 := newHarness(t, gateway.Config{HeadersTimeout: time.Second, MaxConnectRetries: -1}, "")
		h2.register(h2.pylon("slow", "slow", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			time.Sleep(2 * time.Second) // no bytes before the timeout
			ctx.SetBodyString(`{}`)
		}))
		start = time.Now()
		if r := h2.chat(nil); r.status != 502 || !strings.Contains(r.body, "upstream-headers-timeout") {
			t.Errorf("silent pylon: %d %s, want 502 naming the timeout", r.status, r.body)
		}
		if got := time.Since(start); got < time.Second || got > 1250*time.Millisecond {
			t.Errorf("silent pylon failed after %v, want 1s (+ at most one watchdog period)", got)
		}
		time.Sleep(2 * time.Second) // let the silent pylon's handler finish
	})
}

// Go's profiles are served under /debug/pprof/ only with EnablePprof.
func TestPprofOnlyWhenEnabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		off := newHarness(t, gateway.Config{}, "")
		if r := off.do("GET", "/debug/pprof/cmdline", nil, nil); r.status != 404 {
			t.Errorf("pprof disabled: %d", r.status)
		}
		on := newHarness(t, gateway.Config{EnablePprof: true}, "")
		if r := on.do("GET", "/debug/pprof/cmdline", nil, nil); r.status != 200 {
			t.Errorf("pprof enabled: %d %s", r.status, r.body)
		}
	})
}

// A buffered answer's load report and metrics are applied once the answer is written
// (deferred off the request's path), and none is lost: the next request on the same
// connection, and any reader after that, sees them.
func TestDeferredAfterAnswerIsApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		p := h.pylon("p1", "c1", idleLoad(), nil)
		h.register(p)
		p.mu.Lock()
		p.load.QueuedInputTokens, p.load.RunningRequests = 4321, 3
		p.mu.Unlock()
		for range 3 {
			if r := h.chat(nil); r.status != 200 {
				t.Fatalf("chat: %d %s", r.status, r.body)
			}
		}
		synctest.Wait()
		if st := h.do("GET", "/debug/state", nil, nil).body; !strings.Contains(st, `"queued_input_size": 4321`) {
			t.Errorf("the reported load did not reach the backend's view: %s", st)
		}
		m := h.do("GET", "/metrics", nil, nil).body
		for _, want := range []string{
			`switchyard_requests_total{routing_key="",model="m",inference_server_id="p1",status="200"} 3`,
			`switchyard_proxy_attempts_total{routing_key="",model="m",inference_server_id="p1",result="upstream_200"} 3`,
			`switchyard_routing_selections_total{routing_key="",model="m",algorithm="power-of-n",selection="primary"} 3`,
			`switchyard_gateway_overhead_seconds_count{model="m"} 3`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

// Registrations race the responses: a registration snapshot taken before the load report
// of a later response must not overwrite that report's numbers (it still brings the fields
// a report does not carry), and a registration taken after the report replaces them. The
// pylon's snapshot builds order the two even within one millisecond; without builds the
// observation time does.
func TestStaleRegistrationKeepsTheFresherReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		p := h.pylon("p1", "c1", load.Load{InputTPS: 100, ObservedAtUnixMilli: 1000}, nil)
		h.register(p)
		p.mu.Lock()
		p.load.QueuedInputTokens, p.load.ObservedAtUnixMilli, p.build = 7, 3000, 5
		p.mu.Unlock()
		if r := h.chat(nil); r.status != 200 {
			t.Fatalf("chat: %d %s", r.status, r.body)
		}
		put := func(queued, kvCapacity uint64, observedMs int64, build uint64) string {
			t.Helper()
			l := load.Load{InputTPS: 100, QueuedInputTokens: queued, KVCapacityTokens: kvCapacity, ObservedAtUnixMilli: observedMs}
			reg := wire.Registration{
				ID: p.id, URL: "http://" + p.addr, ClusterID: p.cluster, HeartbeatMs: 60_000, DispatchSeq: 1,
				Models: map[string]wire.Model{"m": {Status: wire.StatusActive, Generation: 1, Build: build, Stats: wire.StatsFromLoad(&l)}},
			}
			body, _ := json.Marshal(reg)
			if r := h.do("PUT", wire.RegistrationPath+p.id, body, nil); r.status != 200 {
				t.Fatalf("register: %d %s", r.status, r.body)
			}
			synctest.Wait()
			return h.do("GET", "/debug/state", nil, nil).body
		}
		for _, c := range []struct {
			name       string
			observedMs int64
			build      uint64
		}{
			{"observed earlier, no build", 2000, 0},
			{"an earlier build in the same millisecond", 3000, 4},
		} {
			if st := put(500, 999, c.observedMs, c.build); !strings.Contains(st, `"queued_input_size": 7,`) || !strings.Contains(st, `"kv_cache_capacity_tokens": 999,`) {
				t.Errorf("%s: want the report's queue (7) and the registration's KV capacity (999):\n%s", c.name, st)
			}
		}
		if st := put(42, 999, 3000, 6); !strings.Contains(st, `"queued_input_size": 42,`) {
			t.Errorf("a later build in the same millisecond did not replace the report:\n%s", st)
		}
	})
}

package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/logx"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
	"github.com/switchyard/switchyard/internal/wire"
)

// syncBuffer is a log sink the gateway's goroutines write to while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p) //nolint:wrapcheck // a bytes.Buffer
}

// accessRecords parses every line as JSON (failing the test on one that does not parse)
// and returns the access records, emptying the buffer.
func (b *syncBuffer) accessRecords(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	text := b.buf.String()
	b.buf.Reset()
	b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(text) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line does not parse as JSON: %v\n%s", err, line)
		}
		if rec["msg"] == "access" {
			out = append(out, rec)
		}
	}
	return out
}

func loggedHarness(t *testing.T, cfg gateway.Config, lbConfig string) (*harness, *syncBuffer) {
	t.Helper()
	var sink syncBuffer
	log, err := logx.New(&sink, logx.FormatJSON, "info")
	if err != nil {
		t.Fatal(err)
	}
	return newLoggedHarness(t, cfg, lbConfig, log), &sink
}

// The fields compared exactly; time, the durations and a generated request id are checked
// apart.
var accessVolatile = cmpopts.IgnoreMapEntries(func(k string, _ any) bool {
	return k == "time" || k == "duration_ms" || k == "ttft_ms"
})

func checkDurations(t *testing.T, rec map[string]any, wantTTFT bool) {
	t.Helper()
	d, ok := rec["duration_ms"].(float64)
	if !ok || d < 0 {
		t.Errorf("duration_ms = %v, want a number >= 0", rec["duration_ms"])
	}
	ttft, has := rec["ttft_ms"].(float64)
	if has != wantTTFT || (has && (ttft <= 0 || ttft > d)) {
		t.Errorf("ttft_ms = %v (duration_ms %v), want present: %v, within the duration", rec["ttft_ms"], d, wantTTFT)
	}
}

// With --access-log-sample 1 every request has one JSON record with the fields of its
// answer: a success (its TTFT the pylon's answer head), an unknown model's 404 (no TTFT),
// an event stream (its TTFT the stream's first byte).
func TestAccessLogRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, sink := loggedHarness(t, gateway.Config{AccessLogSample: 1}, `{"default":"round-robin"}`)
		h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			if bytes.Contains(ctx.PostBody(), []byte(`"stream":true`)) {
				time.Sleep(30 * time.Millisecond) // the prefill
				ctx.SetContentType("text/event-stream")
				ctx.SetBodyStream(&scriptedBody{chunks: append(events(2), "data: [DONE]\n\n"), gap: 10 * time.Millisecond}, -1)
				return
			}
			time.Sleep(25 * time.Millisecond) // a buffered answer comes once generated
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"ok":true}`)
		}))
		sink.accessRecords(t) // drop the start-up records

		if r := h.chat(map[string]string{"x-request-id": "req-ok", "x-input-tokens": "7"}); r.status != 200 {
			t.Fatalf("success: %d %s", r.status, r.body)
		}
		rUnknown := h.do("POST", "/v1/chat/completions", []byte(`{"model":"nope","messages":[{"role":"user","content":"hello"}]}`),
			map[string]string{"x-request-id": "req-unknown", "x-input-tokens": "3"})
		var body struct{ Error struct{ Code string } }
		if err := json.Unmarshal([]byte(rUnknown.body), &body); rUnknown.status != 404 || err != nil || body.Error.Code == "" {
			t.Fatalf("unknown model: %d %s, want a 404 with an error code", rUnknown.status, rUnknown.body)
		}
		if r := h.do("POST", "/v1/chat/completions", []byte(streamChat), map[string]string{"x-request-id": "req-stream", "x-input-tokens": "5"}); r.status != 200 {
			t.Fatalf("stream: %d %s", r.status, r.body)
		}
		synctest.Wait() // the records are written once the answers are
		got := sink.accessRecords(t)
		want := []map[string]any{
			{
				"level": "INFO", "msg": "access", "component": "gateway", "request_id": "req-ok", "model": "m", "routing_key": "",
				"algorithm": "round-robin", "backend": "p1", "cluster": "c1", "attempts": 1.0, "status": 200.0, "input_tokens": 7.0,
			},
			{
				"level": "INFO", "msg": "access", "component": "gateway", "request_id": "req-unknown", "model": "nope", "routing_key": "",
				"algorithm": "", "backend": "", "cluster": "", "attempts": 0.0, "status": 404.0, "error_code": body.Error.Code, "input_tokens": 3.0,
			},
			{
				"level": "INFO", "msg": "access", "component": "gateway", "request_id": "req-stream", "model": "m", "routing_key": "",
				"algorithm": "round-robin", "backend": "p1", "cluster": "c1", "attempts": 1.0, "status": 200.0, "input_tokens": 5.0,
			},
		}
		if diff := cmp.Diff(want, got, accessVolatile); diff != "" {
			t.Fatalf("access records (-want +got):\n%s", diff)
		}
		checkDurations(t, got[0], true)
		checkDurations(t, got[1], false)
		if ttft := got[0]["ttft_ms"].(float64); ttft < 25 {
			t.Errorf("success: ttft_ms %v, want the pylon's 25 ms to its answer", ttft)
		}
		checkDurations(t, got[2], true)
		if ttft, d := got[2]["ttft_ms"].(float64), got[2]["duration_ms"].(float64); ttft < 30 || d < ttft+20 {
			t.Errorf("stream: ttft_ms %v, duration_ms %v; want the 30 ms prefill, then two 10 ms gaps", ttft, d)
		}
	})
}

// The TTFT of an answer that is not an event stream is the time to the pylon's answer
// head: a JSON answer streamed by the pylon (head and first chunk after a 40 ms "prefill",
// the rest 30 ms later) has ttft_ms 40 and duration_ms 70; a request that never mentions
// "stream" is read whole, its head with its body; an error the gateway makes itself after
// its attempt (the pylon's body cut short: 502) has none.
func TestAccessLogTTFTOfBufferedAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, sink := loggedHarness(t, gateway.Config{AccessLogSample: 1, MaxRequestRetries: gateway.NoRetries}, `{"default":"round-robin"}`)
		h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			time.Sleep(40 * time.Millisecond)
			ctx.SetContentType("application/json")
			body := &scriptedBody{chunks: []string{`{"choices":`, `[]}`}, gap: 30 * time.Millisecond}
			if len(ctx.Request.Header.Peek("x-cut")) > 0 {
				body.err = errPylonDied
			}
			ctx.SetBodyStream(body, -1)
		}))
		sink.accessRecords(t)
		for _, c := range []struct {
			name, body string
			hdr        map[string]string
			status     int
			ttft, dur  float64 // -1: no ttft_ms
		}{
			{"streamed JSON", noStreamChat, nil, 200, 40, 70},
			{"buffered", strings.ReplaceAll(noStreamChat, `"stream":false,`, ""), nil, 200, 70, 70},
			{"cut", noStreamChat, map[string]string{"x-cut": "1"}, 502, -1, 70},
		} {
			if r := h.do("POST", "/v1/chat/completions", []byte(c.body), c.hdr); r.status != c.status {
				t.Fatalf("%s: %d %s, want %d", c.name, r.status, r.body, c.status)
			}
			synctest.Wait()
			got := sink.accessRecords(t)
			if len(got) != 1 {
				t.Fatalf("%s: %d records, want 1: %v", c.name, len(got), got)
			}
			ttft, has := got[0]["ttft_ms"].(float64)
			if d := got[0]["duration_ms"].(float64); has != (c.ttft >= 0) || (has && ttft != c.ttft) || d != c.dur {
				t.Errorf("%s: ttft_ms %v, duration_ms %v; want %v, %v", c.name, got[0]["ttft_ms"], d, c.ttft, c.dur)
			}
		}
	})
}

// A request retried on a sibling after a retryable 429 is one record: the backend that
// answered, two attempts; a request without x-request-id carries the generated one.
func TestAccessLogRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, sink := loggedHarness(t, gateway.Config{AccessLogSample: 1}, `{"default":"round-robin"}`)
		h.register(h.pylon("a1", "a", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(429)
			ctx.Response.Header.Set(wire.HeaderRetryable, "true")
			ctx.Response.Header.Set(wire.HeaderRetryReason, wire.RetryQueueEstimateMismatch)
		}))
		h.register(h.pylon("a2", "a", idleLoad(), nil))
		sink.accessRecords(t)
		r := h.chat(nil)
		if r.status != 200 || r.headers["X-Inference-Server-Id"] != "a2" {
			t.Fatalf("%d from %s, want 200 from a2", r.status, r.headers["X-Inference-Server-Id"])
		}
		synctest.Wait()
		got := sink.accessRecords(t)
		if len(got) != 1 {
			t.Fatalf("%d access records, want 1: %v", len(got), got)
		}
		rec := got[0]
		if id, _ := rec["request_id"].(string); !strings.HasPrefix(id, "gw-test-") {
			t.Errorf("request_id %q, want the generated gw-test-…", id)
		}
		for k, v := range map[string]any{"backend": "a2", "cluster": "a", "attempts": 2.0, "status": 200.0} {
			if rec[k] != v {
				t.Errorf("%s = %v, want %v", k, rec[k], v)
			}
		}
		if _, ok := rec["error_code"]; ok {
			t.Errorf("a success has an error_code: %v", rec)
		}
	})
}

// --access-log-errors without sampling writes the failures only (a pylon's 503 passed
// through, with the error code of its body), and with neither flag nothing is written.
func TestAccessLogErrorsOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gateway.Config
		want []string // status/error_code of each record
	}{
		{"errors", gateway.Config{AccessLogErrors: true, MaxRequestRetries: gateway.NoRetries}, []string{"503/engine_full"}},
		{"off", gateway.Config{MaxRequestRetries: gateway.NoRetries}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, sink := loggedHarness(t, tc.cfg, "")
				h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
					if len(ctx.Request.Header.Peek("x-busy")) == 0 {
						ctx.SetBodyString(`{"ok":true}`)
						return
					}
					ctx.SetStatusCode(503)
					ctx.Response.Header.Set(wire.HeaderRetryable, "true")
					ctx.Response.Header.Set(wire.HeaderRetryReason, wire.RetryUpstreamAdmission)
					ctx.SetContentType("application/json")
					ctx.SetBodyString(`{"error":{"message":"full","type":"server_error","code":"engine_full"}}`)
				}))
				sink.accessRecords(t)
				if r := h.chat(nil); r.status != 200 {
					t.Fatalf("success: %d %s", r.status, r.body)
				}
				if r := h.chat(map[string]string{"x-busy": "1"}); r.status != 503 {
					t.Fatalf("busy: %d %s", r.status, r.body)
				}
				synctest.Wait()
				recs := sink.accessRecords(t)
				got := make([]string, 0, len(recs))
				for _, rec := range recs {
					got = append(got, fmt.Sprintf("%v/%v", rec["status"], rec["error_code"]))
					if rec["backend"] != "p1" || rec["attempts"] != 1.0 {
						t.Errorf("record %v, want backend p1 and 1 attempt", rec)
					}
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("records (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// A request the access log does not write (errors only, the answer a 200) allocates
// nothing more than with the log off (see TestGatewayRequestPathAllocatesNothing).
func TestAccessLogSkippedRequestAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback sockets")
	}
	if mocktest.RaceEnabled {
		t.Skip("allocation counts need a build without -race (make test runs this test in one)")
	}
	upstream := serve(t, pylonLike())
	log := slog.New(slog.NewJSONHandler(io.Discard, nil)) //nolint:sloglint // enabled at info (DiscardHandler is not): the access log is on
	g, err := gateway.New(gateway.Config{GatewayID: "bench", AccessLogErrors: true}, gateway.Deps{Now: time.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { _ = g.Serve(gln); done <- struct{}{} }()
	go func() { _ = g.ServeAdmin(aln); done <- struct{}{} }()
	t.Cleanup(func() {
		g.Shutdown()
		<-done
		<-done
	})
	register(t, aln.Addr().String(), "http://"+upstream)
	c := &fasthttp.HostClient{Addr: gln.Addr().String()}
	defer c.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/v1/chat/completions")
	req.SetHost(c.Addr)
	req.Header.Set(wire.HeaderModel, benchModel)
	req.Header.Set(wire.HeaderInputTokens, "3")
	req.Header.Set(wire.HeaderRequestID, benchRequestID)
	req.SetBodyString(`{"model":"` + benchModel + `","messages":[{"role":"user","content":"hi"}]}`)
	do := func() {
		if err := c.Do(req, resp); err != nil || resp.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
		}
	}
	for range 200 {
		do()
	}
	if n := testing.AllocsPerRun(2000, do); n > 1 { // fasthttp's drain of the streamed request body
		t.Errorf("%.2f allocations per request with the access log on but not writing, want at most 1", n)
	}
}

package gateway_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/gateway"
)

// scriptedBody is a fake pylon's streamed body: one chunk per Read, gap apart (the first
// at once), then err, or the end of the body when err is nil. forever repeats the chunks
// until the reader is closed.
type scriptedBody struct {
	chunks  []string
	gap     time.Duration
	err     error
	forever bool
	i       int
}

func (b *scriptedBody) Read(p []byte) (int, error) {
	if b.i == len(b.chunks) {
		if !b.forever {
			if b.err != nil {
				return 0, b.err
			}
			return 0, io.EOF
		}
		b.i = 0
	}
	if b.i > 0 || b.forever {
		time.Sleep(b.gap)
	}
	n := copy(p, b.chunks[b.i])
	b.i++
	return n, nil
}

var errPylonDied = errors.New("the pylon died")

const (
	streamChat = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	// Mentions "stream" (so the gateway streams the upstream body) but asks for none.
	noStreamChat = `{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`
)

func event(i int) string {
	return fmt.Sprintf("data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
}

func events(k int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = event(i)
	}
	return out
}

// sseEvents splits an SSE body into its events (the text between blank lines).
func sseEvents(body string) []string {
	var out []string
	for ev := range strings.SplitSeq(body, "\n\n") {
		if ev != "" {
			out = append(out, ev)
		}
	}
	return out
}

// errorEvents returns the events carrying an OpenAI error object, decoded.
func errorEvents(t *testing.T, body string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, ev := range sseEvents(body) {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || !strings.HasPrefix(data, `{"error"`) {
			continue
		}
		var e struct {
			Error map[string]string `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("error event %q: %v", data, err)
		}
		out = append(out, e.Error)
	}
	return out
}

func metricLine(t *testing.T, h *harness, series string) string {
	t.Helper()
	for line := range strings.SplitSeq(h.do("GET", "/metrics", nil, nil).body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// inflightIs checks the gateway's in-flight gauge (a stream counts until it ends).
func inflightIs(t *testing.T, h *harness, want string) {
	t.Helper()
	if got := metricLine(t, h, "switchyard_inflight_requests"); got != want {
		t.Errorf("inflight_requests = %q, want %s", got, want)
	}
}

func requestsWith(status string) string {
	return `switchyard_requests_total{routing_key="",model="m",inference_server_id="p1",status="` + status + `"}`
}

// A pylon whose connection closes after K events (it died): the client's stream gets the
// K events, then exactly one error event (an OpenAI error object, code
// upstream_stream_error) and a normal end of the body, no [DONE], as soon as the pylon's
// connection is gone. The request is counted with status 502, not 200.
func TestStreamPylonDiesMidStreamEndsWithOneErrorEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MaxConnectRetries: -1}, "")
		const k = 3
		h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStream(&scriptedBody{chunks: events(k), gap: 100 * time.Millisecond, err: errPylonDied}, -1)
		}))
		start := time.Now()
		r := h.do("POST", "/v1/chat/completions", []byte(streamChat), nil)
		took := time.Since(start)
		if r.status != 200 || r.headers["Content-Type"] != "text/event-stream" {
			t.Fatalf("status %d, headers %v", r.status, r.headers)
		}
		evs := sseEvents(r.body)
		if len(evs) != k+1 || strings.Join(evs[:k], "\n\n")+"\n\n" != strings.Join(events(k), "") {
			t.Fatalf("body %q, want the %d events then one error event", r.body, k)
		}
		errs := errorEvents(t, r.body)
		if len(errs) != 1 || errs[0]["code"] != "upstream_stream_error" || errs[0]["type"] != "server_error" || errs[0]["message"] == "" {
			t.Errorf("error events %v, want one server_error upstream_stream_error with a message", errs)
		}
		if strings.Contains(r.body, "[DONE]") {
			t.Error("a [DONE] after the failure")
		}
		// The events took 200 ms (100 ms apart); the pylon died right after the last one.
		if took > 200*time.Millisecond+time.Second {
			t.Errorf("the stream ended %v after the request, want within 1 s of the failure at 200 ms", took)
		}
		synctest.Wait()
		if got := metricLine(t, h, requestsWith("502")); got != "1" {
			t.Errorf("requests_total{status=502} = %q, want 1", got)
		}
		if got := metricLine(t, h, requestsWith("200")); got != "" && got != "0" {
			t.Errorf("requests_total{status=200} = %q, want none", got)
		}
		inflightIs(t, h, "0")
	})
}

// A pylon that ends its stream with its own error event and then loses its connection
// (or ends the body normally): the client gets exactly that one error event, the gateway
// adds none.
func TestStreamPylonErrorEventIsNotDoubled(t *testing.T) {
	const pylonError = `data: {"error":{"message":"the connection to the inference engine failed before the stream finished","type":"server_error","code":"upstream_stream_error"}}` + "\n\n"
	for _, tc := range []struct {
		name string
		err  error
	}{{"then the connection closes", errPylonDied}, {"then the body ends", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, gateway.Config{MaxConnectRetries: -1}, "")
				h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
					ctx.SetContentType("text/event-stream")
					ctx.SetBodyStream(&scriptedBody{chunks: append(events(2), pylonError), gap: 10 * time.Millisecond, err: tc.err}, -1)
				}))
				r := h.do("POST", "/v1/chat/completions", []byte(streamChat), nil)
				if r.status != 200 || r.body != strings.Join(events(2), "")+pylonError {
					t.Fatalf("%d %q, want the pylon's events and its error event unchanged", r.status, r.body)
				}
				synctest.Wait()
				if got := metricLine(t, h, requestsWith("502")); got != "1" {
					t.Errorf("requests_total{status=502} = %q, want 1", got)
				}
			})
		})
	}
}

// A stream that finishes is relayed byte for byte and counted 200; a pylon connection
// lost after [DONE] changes nothing (the client has the whole answer).
func TestStreamFinishedStreamIsUntouched(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{{"normal end", nil}, {"connection lost after [DONE]", errPylonDied}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, gateway.Config{MaxConnectRetries: -1}, "")
				chunks := append(events(3), "data: [DONE]\n\n")
				h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
					ctx.SetContentType("text/event-stream")
					ctx.SetBodyStream(&scriptedBody{chunks: chunks, gap: 10 * time.Millisecond, err: tc.err}, -1)
				}))
				r := h.do("POST", "/v1/chat/completions", []byte(streamChat), nil)
				if r.status != 200 || r.body != strings.Join(chunks, "") {
					t.Fatalf("%d %q", r.status, r.body)
				}
				synctest.Wait()
				if got := metricLine(t, h, requestsWith("200")); got != "1" {
					t.Errorf("requests_total{status=200} = %q, want 1", got)
				}
				inflightIs(t, h, "0")
			})
		})
	}
}

// A non-streamed answer whose body the pylon cuts short (its headers sent, Content-Length
// 200, 21 bytes of body) is a 502 JSON error, not a truncated answer: whether the gateway
// read it as a stream (the request mentions "stream") or whole.
func TestStreamCutJSONAnswerIs502(t *testing.T) {
	for _, body := range []string{noStreamChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`} {
		t.Run(body, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, gateway.Config{MaxConnectRetries: -1}, "")
				h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
					ctx.SetContentType("application/json")
					ctx.Response.ImmediateHeaderFlush = true
					ctx.SetBodyStream(&scriptedBody{chunks: []string{`{"id":"x","choices":[`}, err: errPylonDied}, 200)
				}))
				r := h.do("POST", "/v1/chat/completions", []byte(body), nil)
				var e struct {
					Error struct {
						Message, Type, Code string
					} `json:"error"`
				}
				if r.status != 502 || !strings.HasPrefix(r.headers["Content-Type"], "application/json") || json.Unmarshal([]byte(r.body), &e) != nil ||
					e.Error.Type != "server_error" || e.Error.Code != "upstream_error" {
					t.Fatalf("%d %v %q, want a 502 OpenAI error", r.status, r.headers["Content-Type"], r.body)
				}
				if body == noStreamChat && !strings.Contains(e.Error.Message, "broke off") {
					t.Errorf("message %q: want the body that broke off named", e.Error.Message)
				}
				synctest.Wait()
				if got := metricLine(t, h, requestsWith("502")); got != "1" {
					t.Errorf("requests_total{status=502} = %q, want 1", got)
				}
			})
		})
	}
}

// A whole non-streamed answer to a request that mentions "stream" is relayed as it was.
func TestStreamJSONAnswerReadWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		const answer = `{"id":"x","choices":[{"message":{"content":"hello"}}]}`
		h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBodyStream(&scriptedBody{chunks: []string{answer[:10], answer[10:]}, gap: 10 * time.Millisecond}, -1)
		}))
		r := h.do("POST", "/v1/chat/completions", []byte(noStreamChat), nil)
		if r.status != 200 || r.body != answer || r.headers["Content-Length"] != strconv.Itoa(len(answer)) {
			t.Fatalf("%d %v %q", r.status, r.headers, r.body)
		}
	})
}

// A client that goes away mid-stream is counted with status 499 (and in
// client_cancelled_total), not 200, and the pylon's stream is closed.
func TestStreamClientCancelCountedAs499(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		pylonDone := make(chan struct{})
		h.register(h.pylon("p1", "c1", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStream(&closeNotifier{Reader: &scriptedBody{chunks: events(1), gap: 100 * time.Millisecond, forever: true}, closed: pylonDone}, -1)
		}))
		conn, err := h.gwLn.Dial()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(streamChat), streamChat)
		br := bufio.NewReader(conn)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			if strings.HasPrefix(line, "data: ") {
				break
			}
		}
		inflightIs(t, h, "1") // the handler has returned; the stream still counts
		_ = conn.Close()      // the client goes away after its first event
		select {
		case <-pylonDone:
		case <-time.After(time.Second):
			t.Fatal("the pylon's stream was not closed within 1 s of the client leaving")
		}
		synctest.Wait()
		if got := metricLine(t, h, requestsWith("499")); got != "1" {
			t.Errorf("requests_total{status=499} = %q, want 1", got)
		}
		if got := metricLine(t, h, requestsWith("200")); got != "" && got != "0" {
			t.Errorf("requests_total{status=200} = %q, want none", got)
		}
		if got := metricLine(t, h, `switchyard_client_cancelled_total{routing_key="",model="m"}`); got != "1" {
			t.Errorf("client_cancelled_total = %q, want 1", got)
		}
		inflightIs(t, h, "0")
	})
}

// closeNotifier closes closed when fasthttp closes the body stream.
type closeNotifier struct {
	io.Reader
	closed chan struct{}
}

func (c *closeNotifier) Close() error {
	close(c.closed)
	return nil
}

// Through a real pylon and mock engine: the engine drops its connection after 3 tokens;
// the pylon ends the stream with its error event, and the client gets exactly that one
// (the gateway adds none), no [DONE]; the gateway counts the request 502.
func TestFullStackEngineDropEndsWithOneErrorEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFullStack(t, "")
		f.backend(t, "a", mock.Config{EnableTestControl: true, NumTokens: 10, TokenDelay: 10 * time.Millisecond, PrefillTokensPerSecond: 100_000}, 100_000)
		time.Sleep(time.Second)
		synctest.Wait()
		ctl := &fasthttp.HostClient{Addr: "ea", Dial: f.dial}
		defer ctl.CloseIdleConnections()
		if status, body, err := putJSON(ctl, "http://ea/test-control/models/dummy-model", `{"drop_after_tokens":3}`); err != nil || status != 200 {
			t.Fatalf("test control: %v %d %s", err, status, body)
		}
		r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"x"}]}`), map[string]string{"x-input-tokens": "10"})
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		errs := errorEvents(t, r.body)
		if len(errs) != 1 || errs[0]["code"] != "upstream_stream_error" || !strings.Contains(errs[0]["message"], "inference engine") {
			t.Errorf("error events %v in %q, want the pylon's one", errs, r.body)
		}
		if n := strings.Count(r.body, `"content":"`); n < 3 || strings.Contains(r.body, "[DONE]") {
			t.Errorf("body %q, want the tokens before the drop and no [DONE]", r.body)
		}
		evs := sseEvents(r.body)
		if last := evs[len(evs)-1]; !strings.Contains(last, `"error"`) {
			t.Errorf("last event %q, want the error event", last)
		}
		synctest.Wait()
		m := f.h.do("GET", "/metrics", nil, nil).body
		if want := `switchyard_requests_total{routing_key="",model="dummy-model",inference_server_id="a",status="502"} 1`; !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	})
}

func putJSON(c *fasthttp.HostClient, url, body string) (int, string, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("PUT")
	req.SetRequestURI(url)
	req.SetBodyString(body)
	err := c.Do(req, resp)
	return resp.StatusCode(), string(resp.Body()), err
}

package pylon_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// logRecorder is a slog.Handler keeping every record at Info and above as one line.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	r.mu.Unlock()
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// matching returns the recorded lines containing s.
func (r *logRecorder) matching(s string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// outcome is what a test client saw of one request.
type outcome struct {
	status     int
	header     map[string]string // by lower-case name
	body       string
	err        error         // from Do or from reading the body
	firstChunk time.Duration // since the request was sent, when the first body bytes arrived
	end        time.Duration // since the request was sent, when the response ended
}

// send posts body to path on the pylon and reads the response as a stream, noting when
// its first bytes and its end arrive. firstChunk, when not nil, is closed at the first
// body bytes.
func (h *hermetic) send(path, id string, inputTokens int, body string, firstChunk chan<- struct{}) outcome {
	return h.sendWith(path, id, inputTokens, body, firstChunk, nil)
}

// sendWith is send with extra request headers.
func (h *hermetic) sendWith(path, id string, inputTokens int, body string, firstChunk chan<- struct{}, extra map[string]string) outcome {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://pylon" + path)
	req.Header.SetMethod("POST")
	req.Header.Set(wire.HeaderRequestID, id)
	req.Header.Set(wire.HeaderModel, "dummy-model")
	req.Header.Set(wire.HeaderInputTokens, strconv.Itoa(inputTokens))
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	req.SetBodyString(body)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.StreamBody = true
	start := time.Now()
	var o outcome
	notified := false // (firstChunk may be 0: virtual time)
	notify := func() {
		if !notified {
			notified = true
			o.firstChunk = time.Since(start)
			if firstChunk != nil {
				close(firstChunk)
			}
		}
	}
	if o.err = h.client.Do(req, resp); o.err != nil {
		o.end = time.Since(start)
		return o
	}
	o.status = resp.StatusCode()
	o.header = map[string]string{}
	for k, v := range resp.Header.All() {
		o.header[strings.ToLower(string(k))] = string(v)
	}
	var b strings.Builder
	if bs := resp.BodyStream(); bs != nil {
		buf := make([]byte, 4096)
		for {
			n, err := bs.Read(buf)
			if n > 0 {
				notify()
				b.Write(buf[:n])
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					o.err = err
				}
				break
			}
		}
	} else if len(resp.Body()) > 0 {
		notify()
		b.Write(resp.Body())
	}
	o.body = b.String()
	o.end = time.Since(start)
	return o
}

const (
	streamBody = `{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	plainBody  = `{"model":"dummy-model","messages":[{"role":"user","content":"hello"}]}`
)

// scrapeMetric returns the value of one series from the pylon's /metrics (−1 if absent).
func (h *hermetic) scrapeMetric(series string) float64 {
	h.t.Helper()
	status, body, err := h.admin.Get(nil, "http://pylon-admin/metrics")
	if err != nil || status != 200 {
		h.t.Fatalf("GET /metrics: %v %d", err, status)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				h.t.Fatalf("series %s: %q", series, line)
			}
			return f
		}
	}
	return -1
}

// problemBody decodes an application/problem+json answer.
func problemBody(t *testing.T, o *outcome) map[string]any {
	t.Helper()
	if ct := o.header["content-type"]; ct != "application/problem+json" {
		t.Errorf("content type %q, want application/problem+json (status %d, body %s)", ct, o.status, o.body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(o.body), &m); err != nil {
		t.Fatalf("problem body %q: %v", o.body, err)
	}
	return m
}

// Shutdown is bounded by the drain timeout even while the engine still holds requests
// (the reported bug: a pylon with --drain-timeout-ms 100 took 12.5 s to exit): at the
// deadline every engine call is aborted — a request still waiting for its response
// headers (streaming or not) gets a 503 problem, a relayed stream is cut — the handlers
// finish, the pylon deregisters, and only then are the actors stopped (no dead letters).
// The bubble ending proves no goroutine was left behind.
func TestHermeticShutdownAbortsEngineCallsAtTheDrainTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		cfg.DrainTimeout = 100 * time.Millisecond
		// Prefill 10 ms per token: 1000 input tokens take 10 s before any response byte;
		// then one event every 5 s.
		h := newHermetic(t, cfg, mock.Config{PrefillTokensPerSecond: 100, TokenDelay: 5 * time.Second, NumTokens: 3})
		h.await(time.Second, running(0))

		var wg sync.WaitGroup
		var preHeaders, midStream, buffered outcome
		streaming := make(chan struct{})
		wg.Go(func() { preHeaders = h.send("/v1/chat/completions", "pre-headers", 1000, streamBody, nil) })
		wg.Go(func() { midStream = h.send("/v1/chat/completions", "mid-stream", 1, streamBody, streaming) })
		wg.Go(func() { buffered = h.send("/v1/chat/completions", "buffered", 1, plainBody, nil) })
		<-streaming
		h.await(time.Second, running(3))

		start := time.Now()
		h.cancel()
		<-h.pylonDone
		took := time.Since(start)
		// The drain timeout, then at most one poll of fasthttp's ShutdownWithContext
		// (100 ms) for the aborted connections to close.
		if limit := cfg.DrainTimeout + 100*time.Millisecond; took > limit {
			t.Errorf("Run returned %v after the stop signal, want ≤ %v (drain timeout %v)", took, limit, cfg.DrainTimeout)
		}
		wg.Wait()
		for name, o := range map[string]*outcome{"pre-headers stream": &preHeaders, "buffered": &buffered} {
			if o.err != nil || o.status != fasthttp.StatusServiceUnavailable {
				t.Errorf("%s request: %d %v %s, want 503", name, o.status, o.err, o.body)
				continue
			}
			if p := problemBody(t, o); p["reason"] != wire.RetryLocalConnectFailure || !strings.Contains(p["detail"].(string), "shut down") {
				t.Errorf("%s request: problem %v", name, p)
			}
		}
		if midStream.status != 200 || midStream.err != nil || strings.Contains(midStream.body, "[DONE]") || !strings.Contains(midStream.body, "data: ") ||
			!strings.HasSuffix(midStream.body, `"code":"upstream_stream_error"}}`+"\n\n") || !strings.Contains(midStream.body, "shutting down") {
			t.Errorf("mid-stream request: status %d, err %v, body %q; want a 200 stream ended after its first events by an error event", midStream.status, midStream.err, midStream.body)
		}
		if n := pylon.Inflight(h.pylon); n != 0 {
			t.Errorf("in-flight accounting after shutdown: %d, want 0", n)
		}
		deletes := 0
		for _, r := range h.close() {
			if r.method == "DELETE" {
				deletes++
			}
		}
		if deletes != 1 {
			t.Errorf("deregistrations: %d DELETE, want 1", deletes)
		}
		if dl := h.logs.matching("DeadLetter"); len(dl) > 0 {
			t.Errorf("messages reached stopped actors (actors stopped before the handlers):\n%s", strings.Join(dl, "\n"))
		}
		if len(h.logs.matching("drain_timeout_aborting_engine_calls")) != 1 {
			t.Error("no drain_timeout_aborting_engine_calls log line")
		}
	})
}

// timeoutConfig is a pylon with both engine timeouts at 1 s: the watchdog ticks every
// 125 ms, so a timeout fires between 1 s and 1.125 s after the wait began.
func timeoutConfig() pylon.Config {
	cfg := pylon.DefaultConfig()
	cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
	cfg.FirstOutputTimeout, cfg.StreamIdleTimeout = time.Second, time.Second
	return cfg
}

const watchPeriod = 125 * time.Millisecond // timeoutConfig's watchdog period

// An engine that sends no response bytes within the first-output timeout gets the
// request answered with 504 problem+json (streaming: the engine is still prefilling;
// non-streaming: it is still generating the whole answer), retryable only with
// --local-connect-failures-retryable like any local upstream failure. The request's
// accounting is released exactly once: x-pylon-load on the 504 no longer counts it,
// requests_total counts it once, and nothing stays in flight.
func TestHermeticFirstOutputTimeoutAnswers504(t *testing.T) {
	for _, retryable := range []bool{false, true} {
		t.Run("retryable="+strconv.FormatBool(retryable), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := timeoutConfig()
				cfg.LocalConnectFailuresRetryable = retryable
				// 1000 input tokens: 10 s of prefill before the stream's headers; a
				// non-streamed answer of 3 tokens takes 2 s.
				h := newHermetic(t, cfg, mock.Config{PrefillTokensPerSecond: 100, TokenDelay: time.Second, NumTokens: 3})
				defer h.close()
				h.await(time.Second, running(0))
				// One after the other: each 504's x-pylon-load then shows the pylon idle.
				streamed := h.send("/v1/chat/completions", "slow-prefill", 1000, streamBody, nil)
				buffered := h.send("/v1/chat/completions", "slow-answer", 1, plainBody, nil)
				for name, o := range map[string]*outcome{"streamed": &streamed, "buffered": &buffered} {
					if o.err != nil || o.status != fasthttp.StatusGatewayTimeout {
						t.Errorf("%s: %d %v %s, want 504", name, o.status, o.err, o.body)
						continue
					}
					if o.end < cfg.FirstOutputTimeout || o.end > cfg.FirstOutputTimeout+watchPeriod {
						t.Errorf("%s: 504 after %v, want within [%v, %v]", name, o.end, cfg.FirstOutputTimeout, cfg.FirstOutputTimeout+watchPeriod)
					}
					if p := problemBody(t, o); p["reason"] != "first_output_timeout" || p["status"] != float64(504) {
						t.Errorf("%s: problem %v", name, p)
					}
					wantRetry, wantReason := "", ""
					if retryable {
						wantRetry, wantReason = "true", "first_output_timeout"
					}
					if got, reason := o.header[wire.HeaderRetryable], o.header[wire.HeaderRetryReason]; got != wantRetry || reason != wantReason {
						t.Errorf("%s: %s %q, %s %q; want %q, %q", name, wire.HeaderRetryable, got, wire.HeaderRetryReason, reason, wantRetry, wantReason)
					}
					lr, err := wire.ParseLoadReport(o.header[wire.HeaderPylonLoad])
					if err != nil || lr.Load.RunningRequests != 0 || lr.Load.QueuedInputTokens != 0 {
						t.Errorf("%s: x-pylon-load %+v %v; want the timed-out requests released", name, lr.Load, err)
					}
				}
				if n := pylon.Inflight(h.pylon); n != 0 {
					t.Errorf("in flight: %d, want 0", n)
				}
				outcomeSeries := `pylon_nonretryable_failures_total{inference_server_id="pylon",reason="first_output_timeout"}`
				if retryable {
					outcomeSeries = `pylon_retryable_responses_total{inference_server_id="pylon",reason="first_output_timeout",status="504"}`
				}
				for series, want := range map[string]float64{
					`pylon_upstream_timeouts_total{reason="first_output"}`:      2,
					`pylon_upstream_timeouts_total{reason="stream_idle"}`:       0,
					`pylon_requests_total{model="dummy-model",status="504"}`:    2,
					`pylon_requests_inflight{model="dummy-model"}`:              0,
					`pylon_requests_state{model="dummy-model",state="pending"}`: 0,
					outcomeSeries: 2,
				} {
					if got := h.scrapeMetric(series); got != want {
						t.Errorf("%s = %v, want %v", series, got, want)
					}
				}
			})
		})
	}
}

// A stream that stalls between chunks longer than the idle timeout is cut: the engine
// connection is closed, the gateway gets an error event and the end of the stream without
// [DONE], the stall is counted, and the request is released exactly once (counted 504).
func TestHermeticStreamIdleTimeoutCutsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := timeoutConfig()
		// The role event and the first token at once, then a 3 s stall.
		h := newHermetic(t, cfg, mock.Config{TokenDelay: 3 * time.Second, NumTokens: 3})
		defer h.close()
		h.await(time.Second, running(0))
		o := h.send("/v1/chat/completions", "stalls", 1, streamBody, nil)
		if o.status != 200 || o.err != nil || !strings.Contains(o.body, `"content":"The"`) || strings.Contains(o.body, "[DONE]") ||
			!strings.HasSuffix(o.body, `"code":"upstream_stream_error"}}`+"\n\n") || !strings.Contains(o.body, "stream idle timeout") {
			t.Fatalf("status %d, err %v, body %q; want a 200 stream ended after the first token by an error event", o.status, o.err, o.body)
		}
		if stall := o.end - o.firstChunk; stall < cfg.StreamIdleTimeout || stall > cfg.StreamIdleTimeout+watchPeriod {
			t.Errorf("stream cut %v after its first chunk, want within [%v, %v]", stall, cfg.StreamIdleTimeout, cfg.StreamIdleTimeout+watchPeriod)
		}
		if n := pylon.Inflight(h.pylon); n != 0 {
			t.Errorf("in flight: %d, want 0", n)
		}
		for series, want := range map[string]float64{
			`pylon_upstream_timeouts_total{reason="stream_idle"}`:    1,
			`pylon_upstream_timeouts_total{reason="first_output"}`:   0,
			`pylon_requests_total{model="dummy-model",status="504"}`: 1,
			`pylon_requests_inflight{model="dummy-model"}`:           0,
		} {
			if got := h.scrapeMetric(series); got != want {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		}
	})
}

// The timeouts bound waits, not responses: a stream whose gaps stay under the idle timeout
// runs far longer than either timeout (unlike fasthttp's DoTimeout, whose deadline stays
// on the connection while a streamed body is read), and an answer arriving just before
// the first-output timeout is relayed. With both timeouts 0 nothing is bounded.
func TestHermeticTimeoutsBoundWaitsNotResponses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    func() pylon.Config
		engine mock.Config
	}{
		// Each gap 900 ms (the first token after the role event too): the stream lasts
		// 5.4 s, the one-token answer 900 ms.
		{"gaps under the timeouts", timeoutConfig, mock.Config{TTFT: 900 * time.Millisecond, TokenDelay: 900 * time.Millisecond, NumTokens: 6}},
		{"timeouts disabled", func() pylon.Config {
			cfg := timeoutConfig()
			cfg.FirstOutputTimeout, cfg.StreamIdleTimeout = 0, 0
			return cfg
		}, mock.Config{TTFT: 3 * time.Second, TokenDelay: 3 * time.Second, NumTokens: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHermetic(t, tc.cfg(), tc.engine)
				defer h.close()
				h.await(time.Second, running(0))
				var wg sync.WaitGroup
				var streamed, buffered outcome
				wg.Go(func() { streamed = h.send("/v1/chat/completions", "long-stream", 1, streamBody, nil) })
				// One token: the whole answer after the TTFT, just under the first-output timeout.
				oneToken := `{"model":"dummy-model","max_tokens":1,"messages":[{"role":"user","content":"hello"}]}`
				wg.Go(func() { buffered = h.send("/v1/chat/completions", "slow-answer", 1, oneToken, nil) })
				wg.Wait()
				if streamed.status != 200 || streamed.err != nil || !strings.HasSuffix(streamed.body, "data: [DONE]\n\n") {
					t.Errorf("stream: %d %v %q, want it whole", streamed.status, streamed.err, streamed.body)
				}
				if buffered.status != 200 || buffered.err != nil || !strings.Contains(buffered.body, `"finish_reason":"length"`) {
					t.Errorf("non-streamed: %d %v %q, want the answer", buffered.status, buffered.err, buffered.body)
				}
				for _, reason := range []string{"first_output", "stream_idle"} {
					if got := h.scrapeMetric(`pylon_upstream_timeouts_total{reason="` + reason + `"}`); got != 0 {
						t.Errorf("%s timeouts: %v, want 0", reason, got)
					}
				}
			})
		})
	}
}

// A client connection that keeps the server busy without the engine — here a request
// whose body never finishes arriving — is closed one abort grace (1 s) after the drain
// timeout, so it cannot hold the shutdown either.
func TestHermeticShutdownClosesStuckClientConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		cfg.DrainTimeout = 100 * time.Millisecond
		h := newHermetic(t, cfg, mock.Config{NumTokens: 1})
		h.await(time.Second, running(0))
		conn, err := h.dial("pylon")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Headers and half of the announced body.
		if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: pylon\r\nContent-Length: 100\r\n\r\n{\"model\":"); err != nil {
			t.Fatal(err)
		}
		closed := make(chan time.Time, 1)
		go func() {
			_, _ = io.ReadAll(conn) // returns once the pylon closes the connection
			closed <- time.Now()
		}()
		time.Sleep(10 * time.Millisecond)
		start := time.Now()
		h.cancel()
		<-h.pylonDone
		took := time.Since(start)
		if lo, hi := cfg.DrainTimeout+time.Second, cfg.DrainTimeout+time.Second+100*time.Millisecond; took < lo || took > hi {
			t.Errorf("Run returned %v after the stop signal, want within [%v, %v]", took, lo, hi)
		}
		if d := (<-closed).Sub(start); d > took {
			t.Errorf("the stuck client connection was closed %v after the stop signal, after Run returned (%v)", d, took)
		}
		if len(h.logs.matching("drain_timeout_closing_client_connections")) != 1 {
			t.Error("no drain_timeout_closing_client_connections log line")
		}
		h.close()
	})
}

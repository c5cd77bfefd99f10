package pylon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/admission"
)

// The one place where the pylon's failures become HTTP answers.
func TestProblemMapping(t *testing.T) {
	t.Parallel()
	type answer struct {
		Status                  int
		Retryable, RetryReason  string
		ContentType, BodyReason string
	}
	for _, tc := range []struct {
		name string
		pr   *problem
		want answer
	}{
		{
			"first-output timeout (fasthttp's ErrTimeout)", upstreamFailure(fasthttp.ErrTimeout, false, false, nil),
			answer{504, "", "", "application/problem+json", reasonFirstOutputTimeout},
		},
		{
			"first-output timeout, retryable local failures", upstreamFailure(fasthttp.ErrTimeout, false, true, nil),
			answer{504, "true", reasonFirstOutputTimeout, "application/problem+json", reasonFirstOutputTimeout},
		},
		{
			"watchdog abort surfacing wrapped", upstreamFailure(fmt.Errorf("read chunk: %w", relay.AbortError(relay.AbortStreamIdle)), false, false, nil),
			answer{504, "", "", "application/problem+json", reasonFirstOutputTimeout},
		},
		{
			"a failure that is not a dial", upstreamFailure(errors.New("dial tcp: connection refused"), false, false, nil),
			answer{503, "", "", "application/problem+json", wire.RetryLocalConnectFailure},
		},
		{
			"connect failure, retryable", upstreamFailure(fasthttp.ErrConnectionClosed, false, true, nil),
			answer{503, "true", wire.RetryLocalConnectFailure, "application/problem+json", wire.RetryLocalConnectFailure},
		},
		{
			"engine unreachable: no connection could be made", upstreamFailure(&relay.DialError{Err: errors.New("connection refused")}, false, false, nil),
			answer{503, "true", wire.RetryLocalConnectFailure, "application/problem+json", wire.RetryLocalConnectFailure},
		},
		{
			"engine unreachable: a dial that timed out", upstreamFailure(&relay.DialError{Err: fasthttp.ErrTimeout}, false, false, nil),
			answer{503, "true", wire.RetryLocalConnectFailure, "application/problem+json", wire.RetryLocalConnectFailure},
		},
		{
			"engine unreachable: closed, and no new connection", upstreamFailure(fasthttp.ErrConnectionClosed, false, false, func() bool { return true }),
			answer{503, "true", wire.RetryLocalConnectFailure, "application/problem+json", wire.RetryLocalConnectFailure},
		},
		{
			"closed, but the engine accepts connections", upstreamFailure(fasthttp.ErrConnectionClosed, false, false, func() bool { return false }),
			answer{503, "", "", "application/problem+json", wire.RetryLocalConnectFailure},
		},
		{
			"first-output timeout: the engine is not asked whether it is down", upstreamFailure(fasthttp.ErrTimeout, false, false, func() bool { panic("asked") }),
			answer{504, "", "", "application/problem+json", reasonFirstOutputTimeout},
		},
		{
			"aborted by shutdown", upstreamFailure(fasthttp.ErrConnectionClosed, true, false, nil),
			answer{503, "", "", "application/problem+json", wire.RetryLocalConnectFailure},
		},
		{
			"aborted by shutdown, even if it looks like a timeout", upstreamFailure(fasthttp.ErrTimeout, true, true, nil),
			answer{503, "true", wire.RetryLocalConnectFailure, "application/problem+json", wire.RetryLocalConnectFailure},
		},
		{
			"body too large", unreadableRequest(fmt.Errorf("read body: %w", fasthttp.ErrBodyTooLarge), 64<<20),
			answer{413, "", "", "application/problem+json", reasonBodyTooLarge},
		},
		{
			"headers too large", unreadableRequest(&fasthttp.ErrSmallBuffer{}, 1),
			answer{431, "", "", "application/problem+json", ""},
		},
		{
			"malformed request", unreadableRequest(io.ErrUnexpectedEOF, 1),
			answer{400, "", "", "application/problem+json", ""},
		},
		{
			"invalid body", invalidBody("request body is not valid JSON"),
			answer{400, "", "", "application/problem+json", reasonInvalidBody},
		},
		{
			"stream required", streamRequired("/v1/responses"),
			answer{400, "", "", "application/problem+json", reasonStreamRequired},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ctx fasthttp.RequestCtx
			tc.pr.write(&ctx)
			var body struct {
				Status int    `json:"status"`
				Reason string `json:"reason"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil || body.Status != tc.want.Status || body.Detail == "" {
				t.Errorf("body %s (%v)", ctx.Response.Body(), err)
			}
			h := &ctx.Response.Header
			got := answer{
				ctx.Response.StatusCode(), string(h.Peek(wire.HeaderRetryable)), string(h.Peek(wire.HeaderRetryReason)),
				string(h.ContentType()), body.Reason,
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Validating a body costs no allocation when it is accepted, and decides streaming once.
func TestCheckBodyAllocatesNothing(t *testing.T) {
	if mocktest.RaceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector (json.Valid pools its scanner)")
	}
	p := &Pylon{cfg: DefaultConfig()}
	p.cfg.RequireStreaming = true
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("http://pylon/v1/chat/completions")
	msgs := strings.Repeat(`{"role":"user","content":[{"type":"text","text":"hello \"world\" \u00e9"}],"tool_calls":[{"id":"a","function":{"arguments":"{\"x\":[1,2.5e3,null,true]}"}}]},`, 40)
	ctx.Request.SetBodyString(`{"model":"m","stream":true,"temperature":0.2,"messages":[` + msgs + `{"role":"user","content":"hi"}]}`)
	stream, pr := p.checkBody(&ctx)
	if !stream || pr != nil {
		t.Fatalf("checkBody = %v, %+v", stream, pr)
	}
	if n := testing.AllocsPerRun(100, func() { p.checkBody(&ctx) }); n != 0 {
		t.Errorf("checkBody allocates %v times per accepted body, want 0", n)
	}
}

func TestStreamRequested(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]bool{
		`{"stream":true}`:                               true,
		`{"model":"m", "stream" :	true}`:                true,
		`{"stream":false}`:                              false,
		`{"stream_options":{"x":1},"stream":true}`:      true,
		`{"stream_options":{"include_usage":true}}`:     false,
		`{"messages":[{"content":"\"stream\": true"}]}`: false,
		`{}`: false,
	} {
		if got := streamRequested([]byte(body)); got != want {
			t.Errorf("streamRequested(%s) = %v, want %v", body, got, want)
		}
	}
}

func TestConfigRejectsNegativeTimeouts(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.UpstreamBaseURL = "http://engine:8090"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.FirstOutputTimeout != 30*time.Second || cfg.StreamIdleTimeout != 30*time.Second || cfg.RequireStreaming {
		t.Errorf("defaults: first output %v, stream idle %v, require streaming %v", cfg.FirstOutputTimeout, cfg.StreamIdleTimeout, cfg.RequireStreaming)
	}
	cfg.FirstOutputTimeout, cfg.StreamIdleTimeout = 0, 0 // disabled
	if err := cfg.Validate(); err != nil {
		t.Errorf("timeouts 0: %v", err)
	}
	cfg.FirstOutputTimeout, cfg.StreamIdleTimeout = -time.Millisecond, -time.Millisecond
	err := cfg.Validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "first-output-timeout must be ≥ 0") || !strings.Contains(err.Error(), "stream-idle-timeout must be ≥ 0") {
		t.Errorf("negative timeouts: %v", err)
	}
}

// A queue-mismatch 429 says why: the estimate over its threshold, or the engine without a
// free slot for a request the gateway expected to queue 0 ms.
func TestQueueMismatchDetail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    admission.Decision
		want string
	}{
		{
			admission.Decision{Result: admission.Rejected, ExpectedMs: 10, ActualMs: 100, ThresholdMs: 35},
			"local queue estimate 100 ms exceeds the threshold 35 ms for the expected 10 ms",
		},
		{
			admission.Decision{Result: admission.Rejected, ThresholdMs: 25, NoFreeSlot: true, Running: 24, Concurrency: 24},
			"no free engine slot (24 of 24 running) for a request expected to queue 0 ms",
		},
		{
			admission.Decision{Result: admission.Rejected, ThresholdMs: 25, NoFreeSlot: true, Share: true, Running: 8, Concurrency: 8},
			"no free slot in this pylon's share of the engine (8 of 8 taken by its requests) for a request expected to queue 0 ms",
		},
	} {
		p := queueMismatch(tc.d, 5)
		if p.Detail != tc.want || p.Status != 429 || p.Reason != wire.RetryQueueEstimateMismatch || !p.retryable {
			t.Errorf("%+v: %+v, want detail %q", tc.d, p, tc.want)
		}
	}
}

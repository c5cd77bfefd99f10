package gateway

import (
	"errors"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
)

func TestAsksForStream(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]bool{
		`{"stream":true}`:                               true,
		`{"model":"m", "stream" :	true}`:                true,
		`{"stream":false}`:                              false,
		`{"stream_options":{"x":1},"stream":true}`:      true,
		`{"stream_options":{"include_usage":true}}`:     false,
		`{"messages":[{"content":"\"stream\": true"}]}`: false,
		`{"stream"}`: false,
		`{}`:         false,
	} {
		if got := asksForStream([]byte(body)); got != want {
			t.Errorf("asksForStream(%s) = %v, want %v", body, got, want)
		}
	}
}

// The first-byte deadline: factor × the TTFT estimate within [floor, headers timeout], for
// streamed requests with a known estimate; the headers timeout otherwise.
func TestFirstByteDeadline(t *testing.T) {
	t.Parallel()
	g := &Gateway{cfg: Config{HeadersTimeout: 30 * time.Second, FirstByteTimeoutFloor: 2 * time.Second, FirstByteTimeoutFactor: 4}}
	for _, tc := range []struct {
		ttft    time.Duration
		known   bool
		stream  bool
		factor  float64
		want    time.Duration
		comment string
	}{
		{10 * time.Millisecond, true, true, 4, 2 * time.Second, "the floor"},
		{time.Second, true, true, 4, 4 * time.Second, "4 × the estimate"},
		{time.Hour, true, true, 4, 30 * time.Second, "the cap"},
		{time.Second, false, true, 4, 30 * time.Second, "unknown estimate"},
		{time.Second, true, false, 4, 30 * time.Second, "a buffered answer"},
		{time.Second, true, true, -1, 30 * time.Second, "turned off"},
	} {
		g.cfg.FirstByteTimeoutFactor = tc.factor
		out := &dispatch.Outcome{TTFT: tc.ttft, HasTTFT: tc.known}
		if got := g.firstByteDeadline(out, tc.stream); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.comment, got, tc.want)
		}
	}
}

func TestTransportFailure(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	if why, err := transportFailure(refused, time.Millisecond, 2*time.Second, 30*time.Second); why != fleet.FailConnect || !errors.Is(err, refused) {
		t.Errorf("refused: %v %v", why, err)
	}
	if why, err := transportFailure(fasthttp.ErrTimeout, 2*time.Second, 2*time.Second, 30*time.Second); why != fleet.FailFirstByteTimeout || !errors.Is(err, errFirstByteTimeout) {
		t.Errorf("first-byte deadline: %v %v", why, err)
	}
	if why, err := transportFailure(fasthttp.ErrTimeout, 30*time.Second, 30*time.Second, 30*time.Second); why != fleet.FailFirstByteTimeout || !errors.Is(err, errHeadersTimeout) {
		t.Errorf("headers timeout: %v %v", why, err)
	}
}

package relay_test

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// readAll reads r to its end with a small buffer (several reads per event).
func readAll(t *testing.T, r io.Reader) (string, error) {
	t.Helper()
	var b strings.Builder
	buf := make([]byte, 16)
	for range 10_000 {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b.String(), nil
			}
			return b.String(), err
		}
	}
	t.Fatal("the stream does not end")
	return "", nil
}

// errorEvent decodes the one error event ending body (its last event).
func errorEvent(t *testing.T, body string) map[string]string {
	t.Helper()
	evs := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	last, ok := strings.CutPrefix(evs[len(evs)-1], "data: ")
	var e struct {
		Error map[string]string `json:"error"`
	}
	if !ok || json.Unmarshal([]byte(last), &e) != nil || e.Error == nil {
		t.Fatalf("body %q does not end with an error event", body)
	}
	if strings.Count(body, `"error"`) != 1 {
		t.Errorf("body %q has more than one error event", body)
	}
	return e.Error
}

var errReset = errors.New("connection reset by peer")

// An upstream failure ends the stream with one error event after a normal event boundary,
// wherever the failure falls: between events, inside one, inside a line.
func TestEndingErrorEventAfterEveryCut(t *testing.T) {
	t.Parallel()
	const two = "data: {\"a\":1}\n\nevent: x\ndata: {\"b\":2}\n\n"
	for cut := 0; cut <= len(two); cut++ {
		e := relay.Ending{Upstream: "backend"}
		up := &upstream{chunks: []string{two[:cut]}, err: errReset}
		body, err := readAll(t, readerFunc(func(p []byte) (int, error) { return e.Read(up, p) }))
		if err != nil || !strings.HasPrefix(body, two[:cut]) {
			t.Fatalf("cut %d: %q %v", cut, body, err)
		}
		tail := body[cut:]
		wantSep := ""
		switch {
		case cut == 0 || strings.HasSuffix(two[:cut], "\n\n"):
		case strings.HasSuffix(two[:cut], "\n"):
			wantSep = "\n"
		default:
			wantSep = "\n\n"
		}
		if !strings.HasPrefix(tail, wantSep+"data: {\"error\"") {
			t.Fatalf("cut %d: tail %q, want %q then the error event", cut, tail, wantSep)
		}
		ev := errorEvent(t, body)
		if ev["code"] != relay.ErrorEventCode || ev["type"] != "server_error" || !strings.Contains(ev["message"], "backend") {
			t.Errorf("cut %d: error %v", cut, ev)
		}
		if !errors.Is(e.Err(), errReset) {
			t.Errorf("cut %d: Err %v", cut, e.Err())
		}
	}
}

// No event is added to a stream that had finished ([DONE], a final Responses event) or
// carried an error event before its upstream failed; the body just ends.
func TestEndingNothingAfterTheEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stream string
		failed bool
	}{
		{"data: {\"a\":1}\n\ndata: [DONE]\n\n", false},
		{"data:[DONE]\r\n\r\n", false},
		{"event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n", false},
		{"data: {\"a\":1}\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n", true},
		{"event: error\ndata: {\"type\":\"error\",\"message\":\"x\"}\n\n: keep-alive\n\n", true},
		{"data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n", true}, // vLLM's mid-stream error
	} {
		// Byte by byte too: the events are followed across reads.
		for _, size := range []int{len(tc.stream), 1} {
			var chunks []string
			for i := 0; i < len(tc.stream); i += size {
				chunks = append(chunks, tc.stream[i:min(i+size, len(tc.stream))])
			}
			e := relay.Ending{Upstream: "backend"}
			up := &upstream{chunks: chunks, err: errReset}
			body, err := readAll(t, readerFunc(func(p []byte) (int, error) { return e.Read(up, p) }))
			if err != nil || body != tc.stream || !e.Finished() || e.Failed() != tc.failed || e.Err() == nil {
				t.Errorf("%q by %d: body %q err %v finished %v failed %v", tc.stream, size, body, err, e.Finished(), e.Failed())
			}
		}
	}
}

// Comments and ordinary events neither finish a stream nor mark it failed; an upstream
// error is passed through untouched when the stream ends normally.
func TestEndingOrdinaryStream(t *testing.T) {
	t.Parallel()
	var ev relay.Events
	ev.Feed([]byte(": ping\n\ndata: {\"content\":\"error\"}\n\nevent: response.output_text.delta\ndata: {}\n\n"))
	if ev.Finished() || ev.Failed() {
		t.Errorf("finished %v failed %v", ev.Finished(), ev.Failed())
	}
	e := relay.Ending{Upstream: "backend"}
	up := &upstream{chunks: []string{chatStream}}
	body, err := readAll(t, readerFunc(func(p []byte) (int, error) { return e.Read(up, p) }))
	if err != nil || body != chatStream || e.Err() != nil {
		t.Errorf("%q %v %v", body, err, e.Err())
	}
}

// The status a failed stream is counted with, by cause.
func TestUpstreamFailedStatus(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]int{
		errReset:                                502,
		io.ErrUnexpectedEOF:                     502,
		relay.AbortError(relay.AbortStreamIdle): 504,
		relay.AbortError(relay.AbortShutdown):   503,
	} {
		if got := relay.UpstreamFailed(err); got.Status != want || !errors.Is(got, err) {
			t.Errorf("%v: %d, want %d", err, got.Status, want)
		}
	}
	if got := relay.ClientGone(errReset); got.Status != relay.StatusClientClosedRequest {
		t.Errorf("client gone: %d", got.Status)
	}
}

// A Stream made an event stream ends a failed engine stream with the error event, reports
// Finished with a 502 StreamError (504 for a stall cut by the idle timeout), and finishes
// with 499 when the client went away instead.
func TestStreamEndsWithErrorEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{{"engine died", errReset, 502}, {"engine stalled", relay.AbortError(relay.AbortStreamIdle), 504}} {
		up := &upstream{chunks: chunks()[:3], err: tc.err}
		obs := &observer{}
		s := relay.NewStream(up, obs, clock(), nil).EndWithErrorEvent("inference engine")
		body, err := readAll(t, s)
		if err != nil || !strings.HasPrefix(body, strings.Join(chunks()[:3], "")) {
			t.Fatalf("%s: %q %v", tc.name, body, err)
		}
		if ev := errorEvent(t, body); !strings.Contains(ev["message"], "inference engine") {
			t.Errorf("%s: error %v", tc.name, ev)
		}
		_ = s.CloseWithError(nil)
		var se *relay.StreamError
		if !errors.As(obs.err, &se) || se.Status != tc.want || !errors.Is(obs.err, tc.err) {
			t.Errorf("%s: finished with %v, want status %d", tc.name, obs.err, tc.want)
		}
	}

	up := &upstream{chunks: chunks()}
	obs := &observer{}
	s := relay.NewStream(up, obs, clock(), nil).EndWithErrorEvent("inference engine")
	buf := make([]byte, 64)
	_, _ = s.Read(buf)
	gone := errors.New("broken pipe")
	_ = s.CloseWithError(gone)
	var se *relay.StreamError
	if !errors.As(obs.err, &se) || se.Status != relay.StatusClientClosedRequest || !errors.Is(obs.err, gone) {
		t.Errorf("client gone: finished with %v", obs.err)
	}

	// An engine stream carrying its own error event ends normally but counts as failed.
	up = &upstream{chunks: []string{"data: {\"error\":{\"message\":\"oom\"}}\n\n"}}
	obs = &observer{}
	s = relay.NewStream(up, obs, clock(), nil).EndWithErrorEvent("inference engine")
	if body, err := readAll(t, s); err != nil || strings.Count(body, `"error"`) != 1 {
		t.Errorf("engine error event: %q %v", body, err)
	}
	_ = s.CloseWithError(nil)
	if !errors.As(obs.err, &se) || se.Status != 502 || !errors.Is(obs.err, relay.ErrErrorEvent) {
		t.Errorf("engine error event: finished with %v", obs.err)
	}
}

// Following the events costs no allocation on the happy path: Ending.Read and a Stream
// with error events read a whole chat stream without allocating.
func TestEndingReadsDoNotAllocate(t *testing.T) {
	if mocktest.RaceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	in := chunks()
	backing := make([]string, len(in))
	up := &upstream{}
	var e relay.Ending
	buf := make([]byte, 64)
	read := readerFunc(func(p []byte) (int, error) { return e.Read(up, p) })
	if n := testing.AllocsPerRun(100, func() {
		copy(backing, in)
		up.chunks = backing
		e.Reset()
		for {
			if _, err := read.Read(buf); err != nil {
				break
			}
		}
	}); n != 0 {
		t.Errorf("Ending.Read: %.1f allocations per stream, want 0", n)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/valyala/fasthttp"
)

// When an upstream fails in the middle of an event stream, the client has already had its
// 200 and part of the events; a bare cut of the connection then reads like a stream that
// simply stopped. Both hops (pylon and gateway) end such a stream on purpose instead: they
// add one last event carrying an OpenAI error object and then end the body normally:
//
//	data: {"error":{"message":"...","type":"server_error","code":"upstream_stream_error"}}
//
// The official OpenAI clients raise an API error for any event whose JSON has an "error"
// key, with or without an "event:" line, and stop reading; no [DONE] follows, as with
// OpenAI's own mid-stream errors. No error event is added when the stream had already
// finished ([DONE], a final Responses event) or already carried an error event, as when
// the pylon ended it with its own before its connection went away.

// ErrorEventCode is the error.code of the event that ends a stream whose upstream failed.
const ErrorEventCode = "upstream_stream_error"

// StatusClientClosedRequest counts a request whose client went away before its answer
// finished (the de facto "client closed request" code; no answer carries it).
const StatusClientClosedRequest = 499

// StreamError is how a relayed stream ended early, as Observer.Finished receives it.
type StreamError struct {
	// Status is the status the request is counted with: StatusClientClosedRequest when the
	// client went away, 502 when the upstream connection failed or the stream carried an
	// error event, 504 when the upstream stalled past the stream idle timeout, 503 when a
	// shutdown aborted it.
	Status int
	Err    error
}

func (e *StreamError) Error() string { return e.Err.Error() }

func (e *StreamError) Unwrap() error { return e.Err }

// ErrErrorEvent is the cause of a stream counted as failed because it carried an error event.
var ErrErrorEvent = errors.New("the stream carried an error event")

// ClientGone is the StreamError of a stream whose client went away (err is the write error).
func ClientGone(err error) *StreamError {
	return &StreamError{Status: StatusClientClosedRequest, Err: err}
}

// UpstreamFailed is the StreamError of a stream whose upstream read failed with err.
func UpstreamFailed(err error) *StreamError {
	status := fasthttp.StatusBadGateway
	var ae AbortError
	if errors.As(err, &ae) {
		switch uint32(ae) {
		case AbortStreamIdle:
			status = fasthttp.StatusGatewayTimeout
		case AbortShutdown:
			status = fasthttp.StatusServiceUnavailable
		default:
		}
	}
	return &StreamError{Status: status, Err: err}
}

// Kinds of SSE events, in increasing order of precedence within one event.
const (
	kindNone  uint8 = iota // no field line yet (comments do not count)
	kindData               // an ordinary event
	kindFinal              // [DONE] or a final Responses API event
	kindError              // an error event
)

// lineHead is how much of a line's start Events keeps: enough for every prefix it looks for.
const lineHead = 32

// Events follows an SSE byte stream as it passes, without buffering it: where the stream
// stands (between events, inside one, inside a line) and whether a final or an error
// event went by. The zero value is ready; Feed costs one IndexByte per line and never
// allocates.
type Events struct {
	head     [lineHead]byte // the current line's first bytes
	headLen  uint8
	lineLen  int   // bytes of the current line so far
	cur      uint8 // the current (undispatched) event's kind
	finished bool  // a final or an error event was dispatched
	failed   bool  // an error event was dispatched
}

// Feed follows b, the next bytes of the stream.
func (e *Events) Feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i]
		}
		if int(e.headLen) < len(e.head) {
			e.headLen += uint8(copy(e.head[e.headLen:], seg)) //nolint:gosec // at most lineHead
		}
		e.lineLen += len(seg)
		if i < 0 {
			return
		}
		e.endLine()
		b = b[i+1:]
	}
}

func (e *Events) endLine() {
	line := e.head[:e.headLen]
	if e.lineLen <= len(e.head) {
		line = bytes.TrimSuffix(line, []byte{'\r'})
	}
	e.headLen, e.lineLen = 0, 0
	if len(line) == 0 { // a blank line dispatches the event
		switch e.cur {
		case kindFinal:
			e.finished = true
		case kindError:
			e.finished, e.failed = true, true
		default:
		}
		e.cur = kindNone
		return
	}
	e.cur = max(e.cur, lineKind(line))
}

var (
	fieldData  = []byte("data:")
	fieldEvent = []byte("event:")
	doneData   = []byte("[DONE]")
	errorData  = [...][]byte{[]byte(`{"error"`), []byte(`{"type":"error"`)}
	errorEvent = []byte("error")
	finalEvent = [...][]byte{[]byte("response.completed"), []byte("response.failed"), []byte("response.incomplete")}
)

// lineKind classifies one field line by its first bytes.
func lineKind(line []byte) uint8 {
	switch {
	case line[0] == ':': // a comment
		return kindNone
	case bytes.HasPrefix(line, fieldData):
		v := bytes.TrimLeft(line[len(fieldData):], " ")
		if bytes.HasPrefix(v, doneData) {
			return kindFinal
		}
		for _, p := range errorData {
			if bytes.HasPrefix(v, p) {
				return kindError
			}
		}
	case bytes.HasPrefix(line, fieldEvent):
		v := bytes.TrimRight(bytes.TrimLeft(line[len(fieldEvent):], " "), " \r")
		if bytes.Equal(v, errorEvent) {
			return kindError
		}
		for _, p := range finalEvent {
			if bytes.Equal(v, p) {
				return kindFinal
			}
		}
	default:
	}
	return kindData
}

// Finished reports whether a final event ([DONE], response.completed …) or an error event
// went by: a client has had the end of the stream.
func (e *Events) Finished() bool { return e.finished }

// Failed reports whether an error event went by.
func (e *Events) Failed() bool { return e.failed }

// appendBoundary appends what ends the partial line and event, if any, so that an event can
// follow. A partial event is then dispatched as it is: it cannot be taken back.
func (e *Events) appendBoundary(dst []byte) []byte {
	switch {
	case e.lineLen > 0:
		return append(dst, "\n\n"...)
	case e.cur != kindNone:
		return append(dst, '\n')
	default:
		return dst
	}
}

// AppendErrorEvent appends an SSE event carrying an OpenAI error object (type
// server_error, code ErrorEventCode) with message.
func AppendErrorEvent(dst []byte, message string) []byte {
	type detail struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	}
	b, err := json.Marshal(struct {
		Error detail `json:"error"`
	}{detail{Message: message, Type: "server_error", Code: ErrorEventCode}})
	if err != nil { // cannot happen: strings only
		b = []byte(`{"error":{"message":"the stream failed","type":"server_error","code":"` + ErrorEventCode + `"}}`)
	}
	dst = append(dst, "data: "...)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}

// errorMessage tells a client why its stream ended; upstream names the failed upstream.
func errorMessage(upstream string, err error) string {
	var ae AbortError
	if errors.As(err, &ae) {
		switch uint32(ae) {
		case AbortStreamIdle:
			return "the " + upstream + " sent nothing for longer than the stream idle timeout; the stream was ended"
		case AbortShutdown:
			return "the stream was ended: the server is shutting down"
		default:
		}
	}
	return "the connection to the " + upstream + " failed before the stream finished"
}

// Ending ends an event stream whose upstream read failed: it follows the stream (Feed)
// and, on the failure (Fail), holds the error event the client gets before the body ends
// normally (Drain). The zero value is ready; nothing is allocated until a failure.
type Ending struct {
	Events
	// Upstream names the upstream in the error message ("backend", "inference engine").
	Upstream string
	buf      []byte // the error event
	pending  []byte // what is left of it to return
	err      error
}

// Fail records the upstream read error err and prepares the error event, unless the
// stream had already finished (the client then only sees the body end).
func (e *Ending) Fail(err error) {
	if e.err != nil {
		return
	}
	e.err = err
	if e.finished {
		return
	}
	e.buf = AppendErrorEvent(e.appendBoundary(e.buf[:0]), errorMessage(e.Upstream, err))
	e.pending = e.buf
}

// Err is the upstream read error recorded by Fail (nil: none).
func (e *Ending) Err() error { return e.err }

// Drain copies what is left of the error event to p; io.EOF once it is all out.
func (e *Ending) Drain(p []byte) (int, error) {
	if len(e.pending) == 0 {
		return 0, io.EOF
	}
	n := copy(p, e.pending)
	e.pending = e.pending[n:]
	return n, nil
}

// Read reads up into p, following the stream. After an upstream read error it returns the
// bytes read with it, then the error event, then io.EOF.
func (e *Ending) Read(up io.Reader, p []byte) (int, error) {
	if e.err != nil {
		return e.Drain(p)
	}
	n, err := up.Read(p)
	if n > 0 {
		e.Feed(p[:n])
	}
	if err == nil || errors.Is(err, io.EOF) {
		return n, err //nolint:wrapcheck // the upstream's own io.EOF, as readers expect
	}
	e.Fail(err)
	if n > 0 {
		return n, nil
	}
	return e.Drain(p)
}

// Reset readies e for another stream, keeping its event buffer.
func (e *Ending) Reset() {
	*e = Ending{Upstream: e.Upstream, buf: e.buf[:0]}
}

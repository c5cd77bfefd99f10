package relay

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// eventStreamType is the content type of an event stream (SSE).
var eventStreamType = []byte("text/event-stream")

// IsEventStream reports whether h is the header of an event stream (text/event-stream,
// parameters or none): the answers the gateway and the pylon relay event by event.
func IsEventStream(h *fasthttp.ResponseHeader) bool {
	return bytes.HasPrefix(h.ContentType(), eventStreamType)
}

// Observer receives a relayed response's milestones. Calls come from the goroutine that
// writes the response (fasthttp's), never concurrently for one stream. Finished's err is
// nil for a stream that finished, else a *StreamError (the status to count it with).
type Observer interface {
	FirstOutput(at time.Time)
	Finished(at time.Time, usage *Usage, err error)
}

// upstream is the engine's response body stream (fasthttp.ReadCloserWithError).
type upstream interface {
	io.Reader
	CloseWithError(err error) error
}

// Stream wraps the engine's body stream: every Read is passed through unchanged (one
// engine chunk → one downstream chunk, no extra buffering) while the scanner watches it.
// fasthttp calls CloseWithError when the response ends or the client write fails; that
// closes the engine stream (aborting the generation on a disconnect) and reports Finished
// exactly once. release runs once the engine stream is closed (for pooled objects).
type Stream struct {
	up      upstream
	obs     Observer
	now     func() time.Time
	release func()
	scan    Scanner
	end     Ending // with sse: ends the stream with an error event on an upstream failure
	sse     bool
	first   bool
	once    sync.Once
	idle    [IdleChunk]byte // WriteTo waits for the next event on it
}

// NewStream returns a Stream over up.
func NewStream(up upstream, obs Observer, now func() time.Time, release func()) *Stream {
	return &Stream{up: up, obs: obs, now: now, release: release}
}

// EndWithErrorEvent makes s an event stream (the upstream answered text/event-stream): an
// upstream read error then ends it with an error event naming upstream and a normal end
// of the body (see Ending), instead of cutting the connection. It returns s.
func (s *Stream) EndWithErrorEvent(upstream string) *Stream {
	s.sse, s.end.Upstream = true, upstream
	return s
}

// Read implements io.Reader.
func (s *Stream) Read(p []byte) (int, error) {
	if s.end.Err() != nil {
		return s.end.Drain(p)
	}
	n, err := s.up.Read(p)
	if n > 0 {
		if s.scan.Feed(p[:n]) && !s.first {
			s.first = true
			s.obs.FirstOutput(s.now())
		}
		if s.sse {
			s.end.Feed(p[:n])
		}
	}
	if err == nil || errors.Is(err, io.EOF) {
		return n, err //nolint:wrapcheck // the engine stream's own io.EOF, as fasthttp expects
	}
	if !s.sse {
		s.finish(UpstreamFailed(err))
		return n, err //nolint:wrapcheck // passed through: fasthttp cuts the response
	}
	s.end.Fail(err)
	if s.end.Finished() && !s.end.Failed() {
		s.finish(nil) // lost after [DONE]: the client has the whole answer
	} else {
		s.finish(UpstreamFailed(err))
	}
	if n > 0 {
		return n, nil
	}
	return s.end.Drain(p)
}

// CloseWithError implements fasthttp's body-stream closer. A non-nil err is the failed
// write to the client: the client went away.
func (s *Stream) CloseWithError(err error) error {
	cerr := s.up.CloseWithError(err)
	switch {
	case err != nil:
		s.finish(ClientGone(err))
	case s.end.Failed():
		s.finish(&StreamError{Status: fasthttp.StatusBadGateway, Err: ErrErrorEvent})
	default:
		s.finish(nil)
	}
	if s.release != nil {
		s.release()
		s.release = nil
	}
	return cerr
}

// WriteTo copies the stream to w, waiting for each event on the stream's own 512-byte
// buffer and taking a pooled 2 KiB one only while more is waiting (CopyStream): fasthttp
// uses it instead of Read and its own 4 KiB buffer (BodyWriterTo).
func (s *Stream) WriteTo(w io.Writer) (int64, error) { return CopyStream(w, s, s.idle[:]) }

// SupportsBodyWriteTo tells fasthttp that WriteTo may replace the Read loop.
func (*Stream) SupportsBodyWriteTo() bool { return true }

// Stream has no Close method on purpose: fasthttp calls Close (when there is one) before
// CloseWithError, and a Close that finished the stream would hide CloseWithError's write
// error, the sign that the client went away.

// finish reports Finished once: err is nil or a *StreamError.
func (s *Stream) finish(err error) {
	s.once.Do(func() {
		if !s.first && s.scan.Usage.Done {
			s.first = true
			s.obs.FirstOutput(s.now())
		}
		s.obs.Finished(s.now(), &s.scan.Usage, err)
	})
}

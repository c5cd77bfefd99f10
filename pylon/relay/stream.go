package relay

import (
	"errors"
	"io"
	"sync"
	"time"
)

// Observer receives a relayed response's milestones. Calls come from the goroutine that
// writes the response (fasthttp's), never concurrently for one stream.
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
	first   bool
	once    sync.Once
}

// NewStream returns a Stream over up.
func NewStream(up upstream, obs Observer, now func() time.Time, release func()) *Stream {
	return &Stream{up: up, obs: obs, now: now, release: release}
}

// Read implements io.Reader.
func (s *Stream) Read(p []byte) (int, error) {
	n, err := s.up.Read(p)
	if n > 0 && s.scan.Feed(p[:n]) && !s.first {
		s.first = true
		s.obs.FirstOutput(s.now())
	}
	if err != nil && !errors.Is(err, io.EOF) {
		s.finish(err)
	}
	return n, err
}

// CloseWithError implements fasthttp's body-stream closer.
func (s *Stream) CloseWithError(err error) error {
	cerr := s.up.CloseWithError(err)
	s.finish(err)
	if s.release != nil {
		s.release()
		s.release = nil
	}
	return cerr
}

// Close implements io.Closer.
func (s *Stream) Close() error { return s.CloseWithError(nil) }

func (s *Stream) finish(err error) {
	s.once.Do(func() {
		if !s.first && s.scan.Usage.Done {
			s.first = true
			s.obs.FirstOutput(s.now())
		}
		s.obs.Finished(s.now(), &s.scan.Usage, err)
	})
}

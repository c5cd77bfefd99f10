package mock

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// words are the generated tokens' texts, cycled.
var words = [...]string{
	"The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".",
	" Switch", "yard", " routes", " tokens", " fast", ",", " and", " well", "!", "\n",
}

func tokenText(i int) string { return words[i%len(words)] }

var (
	errDropped     = errors.New("connection dropped by fault injection")
	errStreamPanic = errors.New("stream panic")
)

// Stream phases.
const (
	phaseHead = iota
	phaseTokens
	phaseStop
	phaseUsage
	phaseDone
	phaseEOF
)

// maxPooledEventBytes bounds the render buffers kept for reuse; a larger one (a long
// response.completed event) is left to the garbage collector.
const maxPooledEventBytes = 16 << 10

// eventBufs holds render buffers shared by all streams: a stream takes one only while it
// renders and writes an event, never while it waits for the next one.
var eventBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getEventBuf() *[]byte { return eventBufs.Get().(*[]byte) } //nolint:forcetypeassert // the pool holds only *[]byte

func putEventBuf(b *[]byte) {
	if cap(*b) > maxPooledEventBytes {
		return
	}
	*b = (*b)[:0]
	eventBufs.Put(b)
}

// sseStream is a streamed response body. fasthttp consumes it through WriteTo (see
// fasthttp.BodyWriterTo), writing and flushing one chunk per event straight from a
// shared render buffer; Read is the fallback and returns one event per call. Either way
// the stream blocks in the serving goroutine until the next event is due: no goroutine,
// pipe or per-stream buffer is held while it waits. Close releases the request.
type sseStream struct {
	g         *gen
	phase     uint8
	token     int
	dropAfter int
	// pending is the unread rest of an event that did not fit a Read's buffer.
	pending []byte
}

func newSSEStream(g *gen, dropAfter int) *sseStream {
	return &sseStream{g: g, dropAfter: dropAfter}
}

// SupportsBodyWriteTo tells fasthttp that WriteTo may replace Read.
func (s *sseStream) SupportsBodyWriteTo() bool { return true }

// WriteTo implements io.WriterTo: it writes each event with one Write call when it is
// due, until the stream ends (nil) or fails.
func (s *sseStream) WriteTo(w io.Writer) (total int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.panicked(r)
		}
	}()
	for {
		if err := s.wait(); err != nil {
			return total, eofIsNil(err)
		}
		buf := getEventBuf()
		*buf, err = s.next(*buf)
		if err != nil {
			putEventBuf(buf)
			return total, eofIsNil(err)
		}
		n, err := w.Write(*buf)
		putEventBuf(buf)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}

func eofIsNil(err error) error {
	if err == io.EOF { //nolint:errorlint // next returns io.EOF itself, unwrapped
		return nil
	}
	return err
}

// Read implements io.Reader: one event per call (or the rest of one that did not fit).
func (s *sseStream) Read(p []byte) (n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = 0, s.panicked(r)
		}
	}()
	if len(s.pending) == 0 {
		if err := s.wait(); err != nil {
			return 0, err
		}
		// Render in place; an event longer than p is rendered into a new array.
		ev, err := s.next(p[:0:len(p)])
		if err != nil {
			return 0, err
		}
		if len(p) > 0 && len(ev) > 0 && &ev[0] == &p[0] {
			return len(ev), nil
		}
		s.pending = ev
	}
	n = copy(p, s.pending)
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		s.pending = nil
	}
	return n, nil
}

// panicked logs a recovered panic; the stream then fails and fasthttp closes the
// connection.
func (s *sseStream) panicked(r any) error {
	s.g.e.log.Error("stream_panic", "panic", fmt.Sprint(r))
	return errStreamPanic
}

// Close implements io.Closer; fasthttp calls it when the response ends or fails.
func (s *sseStream) Close() error {
	s.g.finish()
	return nil
}

// wait blocks until the next event is due: only token events wait. It fails when the
// fault injection drops the connection or the engine closes. Call it once before each
// next.
func (s *sseStream) wait() error {
	g := s.g
	if s.phase != phaseTokens || s.token >= g.req.outputTokens {
		return nil
	}
	if s.dropAfter >= 0 && s.token >= s.dropAfter {
		return errDropped
	}
	return g.waitToken(s.token)
}

// next appends the next event to dst (after wait) and advances the stream; io.EOF
// after the last event.
func (s *sseStream) next(dst []byte) ([]byte, error) {
	g := s.g
	ep := g.req.endpoint
	for {
		switch s.phase {
		case phaseHead:
			s.phase = phaseTokens
			switch ep {
			case epChat:
				dst = append(dst, "data: "...)
				dst = g.chunkPrefix(dst)
				dst = append(dst, `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
				return dst, nil
			case epResponses:
				dst = append(dst, "event: response.created\ndata: "...)
				dst = append(dst, `{"type":"response.created","response":`...)
				dst = g.appendResponseObject(dst, "in_progress", nil)
				dst = append(dst, "}\n\n"...)
				return dst, nil
			case epCompletions, epEmbeddings, numEndpoints:
			}
		case phaseTokens:
			if s.token >= g.req.outputTokens {
				s.phase = phaseStop
				continue
			}
			g.emit(s.token)
			text := tokenText(s.token)
			s.token++
			switch ep {
			case epChat:
				dst = append(dst, "data: "...)
				dst = g.chunkPrefix(dst)
				dst = append(dst, `"delta":{"content":`...)
				dst = appendJSONString(dst, text)
				dst = append(dst, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
			case epCompletions:
				dst = append(dst, "data: "...)
				dst = g.chunkPrefix(dst)
				dst = append(dst, `"text":`...)
				dst = appendJSONString(dst, text)
				dst = append(dst, `,"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
			case epResponses:
				dst = append(dst, "event: response.output_text.delta\ndata: "...)
				dst = append(dst, `{"type":"response.output_text.delta","item_id":"msg_`...)
				dst = appendJSONInner(dst, g.id)
				dst = append(dst, `","output_index":0,"content_index":0,"delta":`...)
				dst = appendJSONString(dst, text)
				dst = append(dst, "}\n\n"...)
			case epEmbeddings, numEndpoints:
			}
			return dst, nil
		case phaseStop:
			s.phase = phaseUsage
			switch ep {
			case epChat:
				dst = append(dst, "data: "...)
				dst = g.chunkPrefix(dst)
				dst = append(dst, `"delta":{},"logprobs":null,"finish_reason":`...)
				dst = appendJSONString(dst, g.finishReason())
				dst = append(dst, "}]}\n\n"...)
			case epCompletions:
				dst = append(dst, "data: "...)
				dst = g.chunkPrefix(dst)
				dst = append(dst, `"text":"","logprobs":null,"finish_reason":`...)
				dst = appendJSONString(dst, g.finishReason())
				dst = append(dst, "}]}\n\n"...)
			case epResponses:
				dst = append(dst, "event: response.completed\ndata: "...)
				dst = append(dst, `{"type":"response.completed","response":`...)
				dst = g.appendResponseObject(dst, "completed", g.outputText())
				dst = append(dst, "}\n\n"...)
				s.phase = phaseEOF
			case epEmbeddings, numEndpoints:
			}
			return dst, nil
		case phaseUsage:
			s.phase = phaseDone
			if g.req.includeUsage {
				dst = append(dst, "data: "...)
				dst = g.appendChunkHead(dst, g.chunkObject())
				dst = append(dst, `"choices":[],"usage":`...)
				dst = g.appendUsage(dst)
				dst = append(dst, "}\n\n"...)
				return dst, nil
			}
		case phaseDone:
			s.phase = phaseEOF
			dst = append(dst, "data: [DONE]\n\n"...)
			return dst, nil
		default:
			return dst, io.EOF
		}
	}
}

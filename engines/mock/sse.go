package mock

import (
	"errors"
	"fmt"
	"io"
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

// sseStream is a streamed response body: each Read returns (part of) one SSE event and
// blocks until that event is due. fasthttp writes each Read as one flushed chunk, so no
// goroutine or pipe is needed per stream. Close releases the request.
type sseStream struct {
	g         *gen
	phase     int
	token     int
	dropAfter int
	prefix    []byte // pre-rendered start of every chunk object
	buf       []byte
	off       int
}

func newSSEStream(g *gen, dropAfter int) *sseStream {
	s := &sseStream{g: g, dropAfter: dropAfter, buf: make([]byte, 0, 512)}
	s.prefix = g.chunkPrefix(s.prefix)
	return s
}

// Read implements io.Reader.
func (s *sseStream) Read(p []byte) (n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.g.e.log.Error("stream_panic", "panic", fmt.Sprint(r))
			n, err = 0, errStreamPanic
		}
	}()
	if s.off >= len(s.buf) {
		s.buf, s.off = s.buf[:0], 0
		if err := s.next(); err != nil {
			return 0, err
		}
	}
	n = copy(p, s.buf[s.off:])
	s.off += n
	return n, nil
}

// Close implements io.Closer; fasthttp calls it when the response ends or fails.
func (s *sseStream) Close() error {
	s.g.finish()
	return nil
}

// next renders the next event into s.buf, waiting for its time.
func (s *sseStream) next() error {
	g := s.g
	ep := g.req.endpoint
	for {
		switch s.phase {
		case phaseHead:
			s.phase = phaseTokens
			switch ep {
			case epChat:
				s.buf = append(s.buf, "data: "...)
				s.buf = append(s.buf, s.prefix...)
				s.buf = append(s.buf, `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
				return nil
			case epResponses:
				s.buf = append(s.buf, "event: response.created\ndata: "...)
				s.buf = append(s.buf, `{"type":"response.created","response":`...)
				s.buf = g.appendResponseObject(s.buf, "in_progress", nil)
				s.buf = append(s.buf, "}\n\n"...)
				return nil
			case epCompletions, epEmbeddings, numEndpoints:
			}
		case phaseTokens:
			if s.token >= g.req.outputTokens {
				s.phase = phaseStop
				continue
			}
			if s.dropAfter >= 0 && s.token >= s.dropAfter {
				return errDropped
			}
			if err := g.waitToken(s.token); err != nil {
				return err
			}
			g.emit(s.token)
			text := tokenText(s.token)
			s.token++
			switch ep {
			case epChat:
				s.buf = append(s.buf, "data: "...)
				s.buf = append(s.buf, s.prefix...)
				s.buf = append(s.buf, `"delta":{"content":`...)
				s.buf = appendJSONString(s.buf, text)
				s.buf = append(s.buf, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
			case epCompletions:
				s.buf = append(s.buf, "data: "...)
				s.buf = append(s.buf, s.prefix...)
				s.buf = append(s.buf, `"text":`...)
				s.buf = appendJSONString(s.buf, text)
				s.buf = append(s.buf, `,"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
			case epResponses:
				s.buf = append(s.buf, "event: response.output_text.delta\ndata: "...)
				s.buf = append(s.buf, `{"type":"response.output_text.delta","item_id":"msg_`...)
				s.buf = appendJSONInner(s.buf, g.id)
				s.buf = append(s.buf, `","output_index":0,"content_index":0,"delta":`...)
				s.buf = appendJSONString(s.buf, text)
				s.buf = append(s.buf, "}\n\n"...)
			case epEmbeddings, numEndpoints:
			}
			return nil
		case phaseStop:
			s.phase = phaseUsage
			switch ep {
			case epChat:
				s.buf = append(s.buf, "data: "...)
				s.buf = append(s.buf, s.prefix...)
				s.buf = append(s.buf, `"delta":{},"logprobs":null,"finish_reason":`...)
				s.buf = appendJSONString(s.buf, g.finishReason())
				s.buf = append(s.buf, "}]}\n\n"...)
			case epCompletions:
				s.buf = append(s.buf, "data: "...)
				s.buf = append(s.buf, s.prefix...)
				s.buf = append(s.buf, `"text":"","logprobs":null,"finish_reason":`...)
				s.buf = appendJSONString(s.buf, g.finishReason())
				s.buf = append(s.buf, "}]}\n\n"...)
			case epResponses:
				s.buf = append(s.buf, "event: response.completed\ndata: "...)
				s.buf = append(s.buf, `{"type":"response.completed","response":`...)
				s.buf = g.appendResponseObject(s.buf, "completed", g.outputText())
				s.buf = append(s.buf, "}\n\n"...)
				s.phase = phaseEOF
			case epEmbeddings, numEndpoints:
			}
			return nil
		case phaseUsage:
			s.phase = phaseDone
			if g.req.includeUsage {
				s.buf = append(s.buf, "data: "...)
				s.buf = g.appendChunkHead(s.buf, g.chunkObject())
				s.buf = append(s.buf, `"choices":[],"usage":`...)
				s.buf = g.appendUsage(s.buf)
				s.buf = append(s.buf, "}\n\n"...)
				return nil
			}
		case phaseDone:
			s.phase = phaseEOF
			s.buf = append(s.buf, "data: [DONE]\n\n"...)
			return nil
		default:
			return io.EOF
		}
	}
}

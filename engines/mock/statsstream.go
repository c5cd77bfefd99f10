package mock

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// maxSubscriberBacklog bounds the unread NDJSON a slow stats subscriber may accumulate;
// beyond it events are dropped (counters are cumulative, so later events repair the view).
const maxSubscriberBacklog = 4 << 20

// hub fans stats events out to the open stats streams.
type hub struct {
	n    atomic.Int64
	mu   sync.Mutex
	subs map[*subscriber]struct{}
	line []byte
}

type subscriber struct {
	mu      sync.Mutex
	buf     []byte
	dropped uint64
	notify  chan struct{}
}

func (h *hub) subscribe() *subscriber {
	s := &subscriber{notify: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[*subscriber]struct{})
	}
	h.subs[s] = struct{}{}
	h.n.Store(int64(len(h.subs)))
	h.mu.Unlock()
	return s
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.n.Store(int64(len(h.subs)))
	h.mu.Unlock()
}

// publish sends a stats event (one line of the NDJSON stats stream) to every subscriber. It
// costs one atomic load when nobody listens.
func (h *hub) publish(requestID, model string, processed, generated uint64, finished bool) {
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.line[:0]
	l = append(l, `{"v":1,"type":"stats","request_id":`...)
	l = appendJSONString(l, requestID)
	l = append(l, `,"model":`...)
	l = appendJSONString(l, model)
	l = append(l, `,"tokens_processed":`...)
	l = appendUint(l, processed)
	l = append(l, `,"tokens_generated":`...)
	l = appendUint(l, generated)
	if finished {
		l = append(l, `,"finished":true}`+"\n"...)
	} else {
		l = append(l, `,"finished":false}`+"\n"...)
	}
	h.line = l
	for s := range h.subs {
		s.push(l)
	}
}

func (s *subscriber) push(line []byte) {
	s.mu.Lock()
	if len(s.buf)+len(line) > maxSubscriberBacklog {
		s.dropped++
	} else {
		s.buf = append(s.buf, line...)
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// appendPings appends the ping lines: one per served model carrying
// max_engine_concurrency when the engine's concurrency is bounded (and not hidden), else
// one bare ping.
func (e *Engine) appendPings(b []byte) []byte {
	n := e.MaxConcurrency()
	if n <= 0 || e.cfg.HideConcurrency {
		return append(b, `{"v":1,"type":"ping"}`+"\n"...)
	}
	e.mu.Lock()
	names := append([]string(nil), e.discovery...)
	e.mu.Unlock()
	for _, m := range names {
		b = append(b, `{"v":1,"type":"ping","model":`...)
		b = appendJSONString(b, m)
		b = append(b, `,"max_engine_concurrency":`...)
		b = appendInt(b, int64(n))
		b = append(b, "}\n"...)
	}
	return b
}

// statsStream is the NDJSON body of GET /pylon/v1/stats/stream.
type statsStream struct {
	e       *Engine
	sub     *subscriber
	pending []byte
	off     int
	timer   *time.Timer
}

func (e *Engine) serveStatsStream(ctx *fasthttp.RequestCtx) {
	s := &statsStream{e: e, sub: e.hub.subscribe(), timer: time.NewTimer(PingInterval)}
	s.pending = e.appendPings(nil) // first line at once, so headers reach the client
	ctx.SetContentType("application/x-ndjson")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStream(s, -1)
}

// Read implements io.Reader: it returns queued events, or a ping each PingInterval.
func (s *statsStream) Read(p []byte) (n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.e.log.Error("stats_stream_panic", "panic", fmt.Sprint(r))
			n, err = 0, errStreamPanic
		}
	}()
	for {
		if s.off < len(s.pending) {
			n = copy(p, s.pending[s.off:])
			s.off += n
			return n, nil
		}
		s.sub.mu.Lock()
		s.pending, s.sub.buf = s.sub.buf, s.pending[:0]
		s.sub.mu.Unlock()
		s.off = 0
		if len(s.pending) > 0 {
			continue
		}
		select {
		case <-s.sub.notify:
		case <-s.timer.C:
			s.pending = s.e.appendPings(s.pending)
			s.timer.Reset(PingInterval)
		case <-s.e.done:
			return 0, io.EOF
		}
	}
}

// Close implements io.Closer.
func (s *statsStream) Close() error {
	s.timer.Stop()
	s.e.hub.unsubscribe(s.sub)
	return nil
}

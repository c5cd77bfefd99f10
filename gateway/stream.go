package gateway

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/internal/relay"
)

// What the client gets when the pylon's answer breaks after its headers:
//   - An event stream (text/event-stream) is handed to fasthttp wrapped in a streamGuard:
//     the pylon's chunks pass through unchanged (no copy), and if the pylon's connection
//     fails mid-stream the client gets one error event and a normal end of the body
//     (relay.Ending), instead of a cut connection. No second error event is added when the
//     pylon had already sent its own (it does when its engine fails).
//   - Any other streamed body (a JSON answer to a request that may have asked for a
//     stream) is read whole before the answer starts, so a body cut short becomes a 502
//     JSON error instead of a truncated answer.
//   - The request is counted when the stream has ended (the connection's deferred work
//     runs after fasthttp has written the answer): status 499 when the client went away
//     (the write to it failed), 502 when the stream broke or carried an error event. A
//     connection without deferred work (served through ServeConn, not Serve) counts the
//     request when the handler returns, with the HTTP status.

// handOver prepares a streamed upstream answer resp for the client: an event stream is
// wrapped in a streamGuard and handed off the connection (or left in resp for fasthttp to
// write), any other body is read whole (a cut one is a 502). The attempt (outcome out,
// sent at sent) is observed for the TTFT estimate's accuracy when its answer is a 200
// event stream (see ttftProbe).
func (g *Gateway) handOver(ctx *fasthttp.RequestCtx, resp *fasthttp.Response, st *attemptState, ts *targetSeries, b *fleet.Backend, out *dispatch.Outcome, sent time.Time) error {
	if !relay.IsEventStream(&resp.Header) {
		return bufferBody(resp, b.ID)
	}
	resp.ImmediateHeaderFlush = true
	cl := resp.Header.ContentLength()
	r, _ := relay.DetachBodyStream(resp) // nil when fasthttp moved the field: said at start-up (streams_unguarded)
	if r == nil {
		return nil
	}
	up, ok := r.(fasthttp.ReadCloserWithError)
	if !ok { // not fasthttp's client stream: put it back as it was
		resp.SetBodyStream(r, cl)
		return nil
	}
	s := guardFor(ctx)
	s.up, s.g, s.ts, s.backend = up, g, ts, b.ID
	st.streamCounted = true // the request's in-flight count is the stream's now, until it ends
	s.end.Upstream = "backend"
	if resp.StatusCode() == fasthttp.StatusOK {
		s.ttft.arm(ts, ts.backend(b.ID), out, sent)
	}
	if st.deferred {
		s.after = st.after
		if st.after.pending&afterAccess != 0 {
			s.access = st.after.access
		}
	}
	if st.trace != nil {
		s.trace = st.trace
		s.trace.startStream(b.ID, resp.StatusCode())
	}
	// Chunked towards the client whatever the pylon's framing: an error event may follow.
	if !g.handoff.HandOff(ctx, resp, s) {
		resp.SetBodyStream(s, -1)
	}
	return nil
}

// clientReadBuffer is the read buffer of a client connection, which caps a request's
// headers (larger ones get 431). fasthttp holds it for as long as a relayed stream lasts
// (the request body is read as a stream, so the buffer is not given back before the
// answer ends). It is the pylon's cap too: the gateway forwards the client's headers, so a
// larger buffer here would only let through requests the pylon refuses.
const clientReadBuffer = 4 << 10

// clientWriteBuffer is the write buffer of a client connection, also held for as long as a
// relayed stream lasts: each event is written and flushed through it. 2 KiB holds an
// answer's headers and a typical event or small answer in one write; larger bodies are
// written around it.
const clientWriteBuffer = 2 << 10

// upstreamWriteBuffer is the write buffer of a connection to a pylon (taken for writing a
// request, then given back): larger request bodies are written around it.
const upstreamWriteBuffer = 2 << 10

// upstreamReadBuffer is the read buffer of a connection to a pylon. A relayed stream holds
// it for as long as it lasts, so it is small: it needs to hold the pylon's response
// headers (a few hundred bytes; larger ones fail the attempt), and larger reads of a body go around it (bufio reads
// straight into a destination at least as large as its buffer).
const upstreamReadBuffer = 2 << 10

// streamGuard is the body stream of an event stream relayed to a client (see above).
// Read passes the pylon's reads through, following the events; it allocates nothing
// until the pylon fails. A connection serves one request at a time: each keeps one
// guard (fasthttp closes the previous stream before the next request).
type streamGuard struct {
	up      fasthttp.ReadCloserWithError // the pylon's body stream
	end     relay.Ending
	g       *Gateway
	ts      *targetSeries
	backend string
	after   *afterResponse // the deferred request count to correct (nil: counted already)
	ttft    ttftProbe
	access  *accessRecord // the access-log record waiting for the first byte (nil: none)
	trace   *reqTrace     // the request's trace (nil: tracing off)
}

// guardFor returns the stream guard of ctx's connection (a new one when it has none).
func guardFor(ctx *fasthttp.RequestCtx) *streamGuard {
	if cc, ok := ctx.Conn().(*clientConn); ok {
		return &cc.stream
	}
	return new(streamGuard)
}

// Read implements io.Reader.
func (s *streamGuard) Read(p []byte) (int, error) {
	n, err := s.end.Read(s.up, p)
	s.ttft.read(n, s.g.deps.Now)
	if s.trace != nil {
		s.trace.read(p[:n])
	}
	if n > 0 && s.access != nil {
		s.access.firstByte, s.access = s.g.deps.Now(), nil
	}
	return n, err
}

// CloseWithError implements fasthttp's body-stream closer; fasthttp calls it once the
// stream is written (err nil) or when writing to the client failed (the client went away).
func (s *streamGuard) CloseWithError(err error) error {
	if s.up == nil { // closed already
		return nil
	}
	cerr := s.up.CloseWithError(err)
	s.g.metrics.infl.Dec()
	status := 0
	switch {
	case s.end.Err() != nil && !s.end.Finished():
		status = fasthttp.StatusBadGateway
		s.g.log.Warn("backend_stream_failed", "backend", s.backend, "model", s.ts.t.Model, "err", s.end.Err())
	case s.end.Failed(): // the pylon ended it with an error event
		status = fasthttp.StatusBadGateway
	case err != nil:
		status = relay.StatusClientClosedRequest
		s.g.metrics.inc(mClientCancelled, "routing_key", s.ts.t.RoutingKey, "model", s.ts.t.Model)
	default:
	}
	if status != 0 && s.after != nil && s.after.pending&afterRequest != 0 {
		s.after.reqCode = status
	}
	if status != 0 && s.after != nil && s.after.pending&afterAccess != 0 {
		s.after.access.status, s.after.access.code = status, streamEndCode(status)
	}
	s.ttft.finish(status == fasthttp.StatusBadGateway)
	if s.trace != nil {
		s.trace.streamEnded(status, s.end.Err(), err)
		s.trace = nil
	}
	s.up, s.g, s.ts, s.backend, s.after, s.access = nil, nil, nil, "", nil, nil
	s.end.Reset()
	return cerr //nolint:wrapcheck // the pylon stream's own close error
}

// streamGuard has no WriteTo (relay.CopyStream, as the pylon's relay.Stream has): the two
// frames it adds to the stack of a goroutine waiting for the pylon's next event keep that
// stack from shrinking to 8 KiB at GC, which cost more per open stream (≈ 7 KB, bench
// streams) than the 2 KiB of fasthttp's copy buffer it saves.

// streamGuard has no Close method: fasthttp would call it before CloseWithError.

// maxPooledBody bounds the read buffers bufferBody keeps for reuse.
const maxPooledBody = 1 << 20

var bodyBufs = sync.Pool{New: func() any { return new(limitedBuffer) }}

// limitedBuffer collects a body up to maxBufferedResponse bytes.
type limitedBuffer struct{ b []byte }

var errBodyTooLarge = fmt.Errorf("the response body exceeds %d bytes", maxBufferedResponse)

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if len(l.b)+len(p) > maxBufferedResponse {
		return 0, errBodyTooLarge
	}
	l.b = append(l.b, p...)
	return len(p), nil
}

// bufferBody reads resp's body stream whole into its body. A body the pylon cut short
// is an upstream error (502): its client gets an error, not a truncated answer.
func bufferBody(resp *fasthttp.Response, backend string) error {
	buf := bodyBufs.Get().(*limitedBuffer) //nolint:forcetypeassert // the pool holds only these
	defer func() {
		if cap(buf.b) <= maxPooledBody {
			buf.b = buf.b[:0]
			bodyBufs.Put(buf)
		}
	}()
	if err := resp.BodyWriteTo(buf); err != nil {
		if errors.Is(err, errBodyTooLarge) {
			return fmt.Errorf("%w: backend %s: %w; ask for \"stream\": true", ErrUpstreamError, backend, err)
		}
		return fmt.Errorf("%w: backend %s: the response body broke off: %w", ErrUpstreamError, backend, err)
	}
	resp.SetBody(buf.b)
	return nil
}

package relay

import (
	"errors"
	"io"
	"sync"
)

// Connection caps and buffer sizes of the gateway's and the pylon's HTTP clients and
// servers, chosen for memory per open stream: a stream holds one client connection and
// one upstream connection in each proxy for as long as the engine generates, so every
// buffer such a pair keeps is multiplied by the streams open at once (bin/bench streams
// measures it; docs/perf has the figures).

// upstreamConnSpare is the connections to one upstream allowed beyond one per client
// connection: the gateway's health probes, the pylon's canaries and calibration.
const upstreamConnSpare = 64

// UpstreamConnCap is a proxy's cap on its connections to one upstream (a HostClient's
// MaxConns) given its data listener's cap on client connections (maxClientConns as
// httpserver.Limits.MaxConnections after WithDefaults; < 0: none). A client connection
// holds at most one upstream connection at a time, so the client cap bounds the upstream
// connections too; a smaller upstream cap would make the streams past it wait for a free
// connection, then fail, while the listener still accepts them.
func UpstreamConnCap(maxClientConns int) int {
	if maxClientConns <= 0 {
		return 1 << 20
	}
	return maxClientConns + upstreamConnSpare
}

// ClientWriteBuffer is the pylon's write buffer per gateway connection, held for as long
// as a relayed stream lasts (each event is written and flushed through it): it holds an
// answer's headers and a typical event or small answer in one write; larger bodies are
// written around it.
const ClientWriteBuffer = 2 << 10

// EngineReadBuffer is the pylon's read buffer per engine connection, held for as long as a
// relayed stream lasts. It must hold the engine's response headers (a few hundred bytes
// from vLLM, SGLang or the mock engine); larger reads of a body go around it.
const EngineReadBuffer = 2 << 10

// copyChunk is the pooled buffer CopyStream copies a sending stream through.
const copyChunk = 2 << 10

var copyBufs = sync.Pool{New: func() any { return new([copyChunk]byte) }}

// IdleChunk is the size of the buffer a stream waits for its next event on
// (CopyStream): a typical event fits in it.
const IdleChunk = 512

// CopyStream copies r to w until r's io.EOF, as fasthttp's own loop for a streamed body
// does through its 4 KiB buffer: each read is written at once (a chunk, flushed), io.EOF
// ends the copy without an error, any other read error or a write error ends it with that
// error. It reads into idle, a buffer the caller keeps (nil: none), until a read fills it,
// the sign that more is waiting; the reads then go into a pooled 2 KiB buffer, given back
// once a read would have fitted in idle again. A stream waiting for its next event so
// holds only idle, and the pool's buffers serve the streams that are sending. The pylon's
// relay stream implements fasthttp's BodyWriterTo with it.
func CopyStream(w io.Writer, r io.Reader, idle []byte) (int64, error) {
	var pooled *[copyChunk]byte
	defer func() {
		if pooled != nil {
			copyBufs.Put(pooled)
		}
	}()
	take := func() []byte {
		pooled = copyBufs.Get().(*[copyChunk]byte) //nolint:forcetypeassert // the pool holds nothing else
		return pooled[:]
	}
	buf := idle
	if len(idle) == 0 {
		buf = take()
	}
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr //nolint:wrapcheck // the writer's own error, as fasthttp's loop returns it
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err //nolint:wrapcheck // the stream's own error, as fasthttp's loop returns it
		}
		switch {
		case pooled == nil && n == len(buf):
			buf = take()
		case pooled != nil && len(idle) > 0 && n < len(idle):
			copyBufs.Put(pooled)
			pooled, buf = nil, idle
		}
	}
}

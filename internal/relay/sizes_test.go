package relay_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/relay"
)

func TestUpstreamConnCapFollowsTheClientCap(t *testing.T) {
	for _, tc := range []struct{ clients, want int }{
		{10000, 10064}, // the default listener cap: every client connection can hold a stream, probes have room
		{1, 65},
		{-1, 1 << 20}, // no listener cap: no practical upstream cap either
	} {
		if got := relay.UpstreamConnCap(tc.clients); got != tc.want {
			t.Errorf("UpstreamConnCap(%d) = %d, want %d", tc.clients, got, tc.want)
		}
	}
}

// chunkReader returns its parts one per Read, then err.
type chunkReader struct {
	parts []string
	err   error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, c.err
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

// writeLog records each Write; it fails from the failAt-th on (0: never).
type writeLog struct {
	got    []string
	failAt int
}

func (w *writeLog) Write(p []byte) (int, error) {
	if w.failAt > 0 && len(w.got)+1 >= w.failAt {
		return 0, errors.New("client gone")
	}
	w.got = append(w.got, string(p))
	return len(p), nil
}

func TestCopyStreamWritesEachReadAndEndsLikeFasthttpsLoop(t *testing.T) {
	big := strings.Repeat("x", 5000) // over the 2 KiB buffer: three writes
	w := &writeLog{}
	n, err := relay.CopyStream(w, &chunkReader{parts: []string{"data: a\n\n", big, "data: [DONE]\n\n"}, err: io.EOF}, nil)
	if err != nil || n != int64(len("data: a\n\n")+len(big)+len("data: [DONE]\n\n")) {
		t.Fatalf("CopyStream = %d, %v", n, err)
	}
	if len(w.got) != 5 || w.got[0] != "data: a\n\n" || w.got[4] != "data: [DONE]\n\n" || strings.Join(w.got[1:4], "") != big {
		t.Fatalf("writes %q", w.got)
	}

	broken := errors.New("upstream reset")
	if _, err := relay.CopyStream(&writeLog{}, &chunkReader{parts: []string{"data: a\n\n"}, err: broken}, nil); !errors.Is(err, broken) {
		t.Fatalf("read error: got %v, want %v", err, broken)
	}
	w = &writeLog{failAt: 2}
	if _, err := relay.CopyStream(w, &chunkReader{parts: []string{"a", "b", "c"}, err: io.EOF}, nil); err == nil || len(w.got) != 1 {
		t.Fatalf("write error: got %v after %d writes", err, len(w.got))
	}
}

// fasthttp copies a body stream through WriteTo only when it says so.
var _ fasthttp.BodyWriterTo = (*relay.Stream)(nil)

// CopyStream waits on the caller's small buffer, moves to a pooled one while reads fill
// it, and back once a read would fit the small one again; every read is written at once.
func TestCopyStreamWaitsOnTheSmallBuffer(t *testing.T) {
	t.Parallel()
	idle := make([]byte, relay.IdleChunk)
	big := strings.Repeat("x", 5000)
	r := &sizeLog{r: &chunkReader{parts: []string{"data: a\n\n", big, "data: b\n\n", "data: [DONE]\n\n"}, err: io.EOF}}
	w := &writeLog{}
	n, err := relay.CopyStream(w, r, idle)
	if err != nil || n != int64(len("data: a\n\n")+len(big)+len("data: b\n\n")+len("data: [DONE]\n\n")) {
		t.Fatalf("CopyStream = %d, %v", n, err)
	}
	if got := strings.Join(w.got, ""); got != "data: a\n\n"+big+"data: b\n\ndata: [DONE]\n\n" {
		t.Fatalf("copied %d bytes, not the stream", len(got))
	}
	// The first event and the start of the big one go through the small buffer; the big
	// one's rest through the 2 KiB one (2048, 2048, then the last 392 bytes); then the
	// small buffer again for the next two events and the end.
	s := relay.IdleChunk
	want := []int{s, s, 2048, 2048, 2048, s, s, s}
	if fmt.Sprint(r.sizes) != fmt.Sprint(want) {
		t.Errorf("read buffer sizes %v, want %v", r.sizes, want)
	}
}

// sizeLog records the size of each buffer Read is given.
type sizeLog struct {
	r     io.Reader
	sizes []int
}

func (s *sizeLog) Read(p []byte) (int, error) {
	s.sizes = append(s.sizes, len(p))
	return s.r.Read(p)
}

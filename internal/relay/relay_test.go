package relay_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/relay"
)

// chatStream is an OpenAI chat completion stream: a role-only first delta (no output), two
// content deltas, a finish reason, a usage chunk and [DONE].
const chatStream = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n" +
	"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":7,\"total_tokens\":27}}\n\n" +
	"data: [DONE]\n\n"

// firstOutputAt is the offset of the first byte after the line carrying the first output.
var firstOutputAt = strings.Index(chatStream, "Hel") + len("Hel\"}}]}\n")

func TestScannerWholeStream(t *testing.T) {
	t.Parallel()
	var s relay.Scanner
	if !s.Feed([]byte(chatStream)) {
		t.Error("Feed did not report the first output")
	}
	want := relay.Usage{OutputChunks: 3, CompletionTokens: 7, PromptTokens: 20, HasUsage: true, Done: true}
	if diff := cmp.Diff(want, s.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if got := s.Usage.OutputTokens(); got != 7 {
		t.Errorf("OutputTokens = %d, want the usage field 7", got)
	}
}

func TestScannerEverySplitPoint(t *testing.T) {
	t.Parallel()
	var whole relay.Scanner
	whole.Feed([]byte(chatStream))
	for cut := 0; cut <= len(chatStream); cut++ {
		var s relay.Scanner
		first1 := s.Feed([]byte(chatStream[:cut]))
		first2 := s.Feed([]byte(chatStream[cut:]))
		if diff := cmp.Diff(whole.Usage, s.Usage); diff != "" {
			t.Fatalf("cut at %d: usage (-whole +split):\n%s", cut, diff)
		}
		// The first output is reported by the chunk that completes its line, exactly once.
		if wantFirst1 := cut >= firstOutputAt; first1 != wantFirst1 || first2 == first1 {
			t.Fatalf("cut at %d: first output reported by chunk 1 %v, chunk 2 %v", cut, first1, first2)
		}
	}
}

func TestScannerByteByByte(t *testing.T) {
	t.Parallel()
	var s relay.Scanner
	firsts := 0
	for i := range len(chatStream) {
		if s.Feed([]byte{chatStream[i]}) {
			firsts++
			if i+1 != firstOutputAt {
				t.Errorf("first output reported at byte %d, want %d", i+1, firstOutputAt)
			}
		}
	}
	if firsts != 1 || s.Usage.OutputChunks != 3 || !s.Usage.HasUsage || !s.Usage.Done {
		t.Errorf("firsts %d, usage %+v", firsts, s.Usage)
	}
}

func TestScannerLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stream string
		want   relay.Usage
	}{
		{"crlf framing", "data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata: [DONE]\r\n\r\n", relay.Usage{OutputChunks: 1, Done: true}},
		{"no space after colon", "data:{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", relay.Usage{OutputChunks: 1}},
		{"comments and other fields ignored", ": keep-alive\nevent: message\nid: 7\nretry: 10\n\n", relay.Usage{}},
		{"empty content is not output", "data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\n\n", relay.Usage{}},
		{"responses api usage", "data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":9}}}\n\n", relay.Usage{CompletionTokens: 9, PromptTokens: 5, HasUsage: true}},
		{"running count", "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"output_tokens_so_far\":4}\n\n", relay.Usage{OutputChunks: 1, CompletionTokens: 4, HasUsage: true}},
		{"no usage: chunks are the count", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n", relay.Usage{OutputChunks: 2}},
		{"line without newline is held", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}", relay.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s relay.Scanner
			s.Feed([]byte(tc.stream))
			if diff := cmp.Diff(tc.want, s.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScannerSkipsOverlongLine(t *testing.T) {
	t.Parallel()
	var s relay.Scanner
	long := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", relay.MaxEventBytes) + "\"}}]}\n"
	for i := 0; i < len(long); i += 4096 {
		s.Feed([]byte(long[i:min(i+4096, len(long))]))
	}
	if s.Usage.OutputChunks != 0 {
		t.Errorf("an overlong line counted: %+v", s.Usage)
	}
	if !s.Feed([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n")) || s.Usage.OutputChunks != 1 {
		t.Errorf("the line after an overlong one was not scanned: %+v", s.Usage)
	}
}

func TestScannerJSONBody(t *testing.T) {
	t.Parallel()
	var s relay.Scanner
	s.JSON([]byte(`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":3}}`))
	if diff := cmp.Diff(relay.Usage{CompletionTokens: 3, PromptTokens: 12, HasUsage: true}, s.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// FuzzScannerSplit: feeding a stream in two chunks gives the same usage as feeding it whole,
// and the first output is reported at most once.
func FuzzScannerSplit(f *testing.F) {
	f.Add([]byte(chatStream), 17)
	f.Add([]byte("data: [DONE]\r\n"), 3)
	f.Add([]byte("data: {\"usage\":{\"completion_tokens\":1}}\n"), 0)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		if cut < 0 || cut > len(data) {
			cut = len(data) / 2
		}
		var whole, split relay.Scanner
		whole.Feed(data)
		a := split.Feed(data[:cut])
		b := split.Feed(data[cut:])
		if whole.Usage != split.Usage {
			t.Fatalf("whole %+v, split at %d %+v", whole.Usage, cut, split.Usage)
		}
		if a && b {
			t.Fatal("first output reported twice")
		}
	})
}

// upstream is a fake engine body stream returning one chunk per Read.
type upstream struct {
	chunks  []string
	err     error // returned after the chunks (io.EOF when nil)
	closed  int
	closeBy error
}

func (u *upstream) Read(p []byte) (int, error) {
	if len(u.chunks) == 0 {
		if u.err != nil {
			return 0, u.err
		}
		return 0, io.EOF
	}
	n := copy(p, u.chunks[0])
	u.chunks[0] = u.chunks[0][n:]
	if u.chunks[0] == "" {
		u.chunks = u.chunks[1:]
	}
	return n, nil
}

func (u *upstream) CloseWithError(err error) error {
	u.closed++
	u.closeBy = err
	return nil
}

// observer records milestones.
type observer struct {
	events []string
	usage  relay.Usage
	err    error
}

func (o *observer) FirstOutput(at time.Time) {
	o.events = append(o.events, "first@"+at.Format("05.000"))
}

func (o *observer) Finished(at time.Time, u *relay.Usage, err error) {
	o.events = append(o.events, "finished@"+at.Format("05.000"))
	o.usage, o.err = *u, err
}

// clock ticks 1 ms per call.
func clock() func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Millisecond)
		return t
	}
}

// chunks cuts chatStream into chunks that split events and lines mid-way.
func chunks() []string {
	var out []string
	for i := 0; i < len(chatStream); i += 37 {
		out = append(out, chatStream[i:min(i+37, len(chatStream))])
	}
	return out
}

func TestStreamPassesBytesThroughChunkByChunk(t *testing.T) {
	t.Parallel()
	in := chunks()
	up := &upstream{chunks: append([]string(nil), in...)}
	obs := &observer{}
	released := 0
	s := relay.NewStream(up, obs, clock(), func() { released++ })
	buf := make([]byte, 64<<10)
	var got []string
	for {
		n, err := s.Read(buf)
		if n > 0 {
			got = append(got, string(buf[:n]))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("chunks (-engine +relayed):\n%s", diff)
	}
	if len(obs.events) != 1 {
		t.Errorf("before close: events %v, want only the first output", obs.events)
	}
	// fasthttp closes the stream once the body is written (and may close again).
	if err := s.CloseWithError(nil); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseWithError(nil)
	if up.closed != 2 || released != 1 {
		t.Errorf("upstream closed %d times (want each close forwarded), released %d times (want 1)", up.closed, released)
	}
	if len(obs.events) != 2 || !strings.HasPrefix(obs.events[1], "finished@") {
		t.Errorf("events %v, want first output then finished once", obs.events)
	}
	want := relay.Usage{OutputChunks: 3, CompletionTokens: 7, PromptTokens: 20, HasUsage: true, Done: true}
	if diff := cmp.Diff(want, obs.usage); diff != "" || obs.err != nil {
		t.Errorf("finished with usage (-want +got):\n%s err %v", diff, obs.err)
	}
}

func TestStreamReadErrorFinishesOnceWithTheError(t *testing.T) {
	t.Parallel()
	broken := errors.New("engine connection reset")
	up := &upstream{chunks: []string{"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"}, err: broken}
	obs := &observer{}
	s := relay.NewStream(up, obs, clock(), nil)
	buf := make([]byte, 1024)
	for {
		if _, err := s.Read(buf); err != nil {
			if !errors.Is(err, broken) {
				t.Fatalf("Read error %v, want %v", err, broken)
			}
			break
		}
	}
	downstream := errors.New("client went away")
	_ = s.CloseWithError(downstream)
	if diff := cmp.Diff([]string{"first@00.001", "finished@00.002"}, obs.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if !errors.Is(obs.err, broken) || !errors.Is(up.closeBy, downstream) {
		t.Errorf("finished with %v (want the read error), upstream closed with %v", obs.err, up.closeBy)
	}
}

func TestStreamDoneWithoutOutputCountsAsFirstOutputAtTheEnd(t *testing.T) {
	t.Parallel()
	up := &upstream{chunks: []string{"data: [DONE]\n\n"}}
	obs := &observer{}
	s := relay.NewStream(up, obs, clock(), nil)
	_, _ = io.Copy(io.Discard, s)
	_ = s.CloseWithError(nil)
	if diff := cmp.Diff([]string{"first@00.001", "finished@00.002"}, obs.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestStreamClientDisconnectBeforeOutput(t *testing.T) {
	t.Parallel()
	up := &upstream{chunks: []string{": ping\n\n"}}
	obs := &observer{}
	s := relay.NewStream(up, obs, clock(), nil)
	buf := make([]byte, 64)
	_, _ = s.Read(buf)
	gone := errors.New("broken pipe")
	_ = s.CloseWithError(gone)
	if len(obs.events) != 1 || !strings.HasPrefix(obs.events[0], "finished@") || !errors.Is(obs.err, gone) || !errors.Is(up.closeBy, gone) {
		t.Errorf("events %v err %v upstream closed by %v", obs.events, obs.err, up.closeBy)
	}
	if !bytes.Equal(buf[:8], []byte(": ping\n\n")) {
		t.Errorf("relayed %q", buf[:8])
	}
}

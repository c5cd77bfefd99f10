package drive

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/engines/mock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's process-wide background goroutines, and idle cleaners that exit
		// within one idle period after the loopback test.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

// fakeSender records when each request starts and finishes after a fixed service time.
type fakeSender struct {
	service time.Duration
	mu      sync.Mutex
	starts  map[int]time.Duration
	start   time.Time
	active  int
	peak    int
}

func (f *fakeSender) send(_ context.Context, r *scenario.Request, sent time.Time) score.Record {
	f.mu.Lock()
	f.starts[r.Index] = sent.Sub(f.start)
	f.active++
	f.peak = max(f.peak, f.active)
	f.mu.Unlock()
	time.Sleep(f.service)
	f.mu.Lock()
	f.active--
	f.mu.Unlock()
	return score.Record{Index: r.Index, ID: r.ID, Status: 200, Completed: true}
}

func manifest(offsets ...time.Duration) *scenario.Manifest {
	m := &scenario.Manifest{Model: "dummy-model"}
	for i, o := range offsets {
		m.Requests = append(m.Requests, scenario.Request{Index: i, ID: "r" + string(rune('a'+i)), Arrival: o, InputTokens: 10, OutputTokens: 3})
	}
	return m
}

func TestPacingAndConcurrency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		m := manifest(0, 10*ms, 20*ms, 20*ms, 100*ms)
		f := &fakeSender{service: 50 * ms, starts: map[int]time.Duration{}, start: time.Now()}
		var before []int
		res, err := run(t.Context(), Config{MaxConcurrency: 2, TimeScale: 2}, m, Deps{Before: func(i int) { before = append(before, i) }}, f)
		if err != nil {
			t.Fatal(err)
		}
		// Scaled arrivals 0, 20, 40, 40, 200 ms; two slots of 50 ms service: request 2
		// waits for request 0 (ends at 50), request 3 for request 1 (ends at 70).
		want := map[int]time.Duration{0: 0, 1: 20 * ms, 2: 50 * ms, 3: 70 * ms, 4: 200 * ms}
		if diff := cmp.Diff(want, f.starts); diff != "" {
			t.Errorf("send times (-want +got):\n%s", diff)
		}
		if f.peak != 2 {
			t.Errorf("peak concurrency %d, want 2", f.peak)
		}
		if res.Length != 250*ms || len(res.Records) != 5 || res.Records[3].Sent != 70*ms {
			t.Errorf("length %v, %d records, record 3 sent at %v", res.Length, len(res.Records), res.Records[3].Sent)
		}
		if diff := cmp.Diff([]int{0, 1, 2, 3, 4}, before); diff != "" {
			t.Errorf("Before calls (-want +got):\n%s", diff)
		}
	})
}

func TestCancelStopsSending(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := manifest(0, time.Second, 2*time.Second)
		f := &fakeSender{service: 10 * time.Millisecond, starts: map[int]time.Duration{}, start: time.Now()}
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancel()
		res, err := run(ctx, Config{MaxConcurrency: 4}, m, Deps{}, f)
		if err == nil || len(res.Records) != 2 {
			t.Errorf("err %v, %d records; want a deadline error after 2 requests", err, len(res.Records))
		}
	})
}

func TestParseTarget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, addr string
		tls, bad bool
	}{
		{"http://127.0.0.1:8000", "127.0.0.1:8000", false, false},
		{"https://example.com", "example.com:443", true, false},
		{"http://localhost/", "localhost:80", false, false},
		{"ftp://x", "", false, true},
		{"127.0.0.1:8000", "", false, true},
	} {
		addr, tls, err := ParseTarget(tt.in)
		if (err != nil) != tt.bad || addr != tt.addr || tls != tt.tls {
			t.Errorf("ParseTarget(%q) = %q, %t, %v", tt.in, addr, tls, err)
		}
	}
}

func TestBody(t *testing.T) {
	t.Parallel()
	if got := string(Body("m", 3, 0)); got != `{"model":"m","stream":true,"messages":[{"role":"user","content":"xxx"}]}` {
		t.Errorf("body %s", got)
	}
	if got := Body("m", 100, 5); strings.Count(string(got), "x") != 5 {
		t.Errorf("capped body %s", got)
	}
}

func TestHasContent(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		`{"choices":[{"delta":{"role":"assistant","content":""}}]}`: false,
		`{"choices":[{"delta":{"content":"Hi"}}]}`:                  true,
		`{"choices":[{"text":"Hi"}]}`:                               true,
		`{"choices":[],"usage":{"prompt_tokens":3}}`:                false,
		`{"type":"response.output_text.delta","delta":"Hi"}`:        true,
		`not json "content"`:                                        false,
	} {
		if got := hasContent([]byte(in)); got != want {
			t.Errorf("hasContent(%s) = %t", in, got)
		}
	}
}

// TestLoopbackEngine drives a real mock engine on 127.0.0.1 over real sockets.
func TestLoopbackEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback test")
	}
	t.Parallel()
	eng, err := mock.New(mock.Config{
		ModelNames: []string{"dummy-model"}, TTFT: 20 * time.Millisecond, TokenDelay: 2 * time.Millisecond,
		PrefillTokensPerSecond: 100000, KVCacheCapacityTokens: 1 << 20, MaxConcurrentRequests: 4,
	}, mock.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- eng.Serve(ln) }()
	defer func() {
		if err := eng.Close(); err != nil {
			t.Error(err)
		}
		<-served
	}()

	ms := time.Millisecond
	m := manifest(0, 5*ms, 10*ms, 15*ms, 20*ms, 25*ms)
	for i := range m.Requests {
		m.Requests[i].AffinityKey = "session-" + string(rune('0'+i%2))
		m.Requests[i].InputTokens = 1000 + uint64(i)*100
	}
	var mu sync.Mutex
	var lines []string
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{Target: "http://" + ln.Addr().String(), MaxConcurrency: 3}, m, Deps{Done: func(r *score.Record, _ int) {
		mu.Lock()
		lines = append(lines, String(r))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 6 || len(lines) != 6 {
		t.Fatalf("%d records, %d progress lines", len(res.Records), len(lines))
	}
	hits := 0
	for _, r := range res.Records {
		if !r.OK() || r.OutputTokens != 3 || r.TTFT < 20*ms || r.TTLT < r.TTFT || r.KV == nil {
			t.Errorf("record %+v", r)
			continue
		}
		if r.KV.Hit {
			hits++
		}
	}
	// Sessions alternate; with at most 3 in flight, later requests of a session find its
	// prefix once an earlier one has finished.
	if hits == 0 {
		t.Errorf("no KV cache hits in %d requests", len(res.Records))
	}
	if res.Length <= 25*ms {
		t.Errorf("length %v", res.Length)
	}

	// A bad model is a recorded failure with the engine's error message.
	bad := manifest(0)
	bad.Model = "no-such-model"
	res, err = Run(ctx, Config{Target: "http://" + ln.Addr().String(), MaxConcurrency: 1}, bad, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Records[0]; r.OK() || r.Status != 404 || !strings.Contains(r.Error, "does not exist") {
		t.Errorf("bad model record %+v", r)
	}
}

// A plain client's body: a session's text is one stream, cut into one user message per
// turn, so a later turn repeats an earlier one's messages and appends one; other sessions
// share none of it; max_tokens carries the output length. EarlierTurns gives each turn
// the shorter turns of its session that precede it in the manifest.
func TestPlainBody(t *testing.T) {
	t.Parallel()
	messages := func(key, id string, tokens uint64, earlier []uint64) []string {
		var b struct {
			Messages []struct {
				Role, Content string
			} `json:"messages"`
			MaxTokens uint64 `json:"max_tokens"`
			Stream    bool   `json:"stream"`
		}
		body := PlainBody("m", &scenario.Request{AffinityKey: key, ID: id, InputTokens: tokens, OutputTokens: 7}, earlier, 0)
		if err := json.Unmarshal(body, &b); err != nil || b.MaxTokens != 7 || !b.Stream {
			t.Fatalf("body %.80s…: %v %+v", body, err, b)
		}
		out := make([]string, 0, len(b.Messages))
		for _, m := range b.Messages {
			if m.Role != "user" {
				t.Errorf("role %q", m.Role)
			}
			out = append(out, m.Content)
		}
		return out
	}
	m := &scenario.Manifest{Requests: []scenario.Request{
		{Index: 0, AffinityKey: "s1", InputTokens: 100},
		{Index: 1, AffinityKey: "s2", InputTokens: 100},
		{Index: 2, AffinityKey: "s1", InputTokens: 150},
		{Index: 3, AffinityKey: "s1", InputTokens: 180},
		{Index: 4},
	}}
	turns := EarlierTurns(m)
	if len(turns[0]) != 0 || !slices.Equal(turns[2], []uint64{100}) || !slices.Equal(turns[3], []uint64{100, 150}) || len(turns[4]) != 0 {
		t.Fatalf("earlier turns %v", turns)
	}
	first, second, third := messages("s1", "r1", 100, turns[0]), messages("s1", "r2", 150, turns[2]), messages("s1", "r3", 180, turns[3])
	if len(first) != 1 || len(second) != 2 || len(third) != 3 {
		t.Fatalf("messages %d, %d, %d; want one per turn", len(first), len(second), len(third))
	}
	if len(first[0]) != 400 || len(strings.Join(second, "")) != 600 || len(third[2]) != 120 {
		t.Errorf("lengths %d, %d, %d; want 4 bytes per token", len(first[0]), len(strings.Join(second, "")), len(third[2]))
	}
	if second[0] != first[0] || third[0] != first[0] || third[1] != second[1] {
		t.Error("a later turn does not repeat the session's earlier messages")
	}
	if other := messages("s2", "r4", 100, nil); other[0][:64] == first[0][:64] {
		t.Error("two sessions share their prompt's beginning")
	}
	if a, b := messages("", "r5", 100, nil), messages("", "r6", 100, nil); a[0][:64] == b[0][:64] {
		t.Error("two requests without a session share their prompt's beginning")
	}
}

// Requests spread over gateway replicas by index; with SpreadByAffinityKey every request
// of one affinity key goes to the same replica (and the keys use more than one), while
// requests without a key still go by index.
func TestMultiSenderSpread(t *testing.T) {
	t.Parallel()
	targets := make([]*httpSender, 3)
	byIndex := multiSender{targets: targets}
	byKey := multiSender{targets: targets, byKey: true}
	replicaOf := map[string]int{}
	used := map[int]bool{}
	for i := range 300 {
		key := ""
		if i%3 != 0 {
			key = "session-" + strconv.Itoa(i%17)
		}
		r := &scenario.Request{Index: i, AffinityKey: key}
		if got := byIndex.pick(r); got != i%3 {
			t.Fatalf("round-robin: request %d to %d, want %d", i, got, i%3)
		}
		got := byKey.pick(r)
		if key == "" {
			if got != i%3 {
				t.Fatalf("by key, no key: request %d to %d, want %d", i, got, i%3)
			}
			continue
		}
		if prev, ok := replicaOf[key]; ok && prev != got {
			t.Fatalf("by key: %s went to %d and %d", key, prev, got)
		}
		replicaOf[key] = got
		used[got] = true
	}
	if len(used) < 2 {
		t.Errorf("16 keys all on replicas %v, want them spread", used)
	}
}

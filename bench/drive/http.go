package drive

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/score"
	"github.com/switchyard/switchyard/internal/wire"
)

// Response headers the driver reads besides the routing contract's.
const (
	HeaderKVHit            = "x-kv-cache-hit"
	HeaderKVReused         = "x-kv-cache-reused-input-tokens"
	HeaderKVUncached       = "x-kv-cache-uncached-input-tokens"
	HeaderKVEvictedEntries = "x-kv-cache-evicted-entries"
	HeaderKVEvictedTokens  = "x-kv-cache-evicted-tokens" //nolint:gosec // a header name, not a credential
	// HeaderEngineQueued is the mock engine's mark on a request that waited for one of
	// its concurrency slots.
	HeaderEngineQueued = "x-engine-queued"
	// HeaderRetries is read when the gateway reports how many times it retried a request
	// (an assumption: the routing contract does not name such a header yet).
	HeaderRetries = "x-switchyard-retries"
)

// maxErrorBody bounds how much of an error response is kept.
const maxErrorBody = 512

type httpSender struct {
	client  *fasthttp.HostClient
	uri     string
	model   string
	timeout time.Duration
	maxBody uint64
	plain   bool
	// turns are the earlier turns' input tokens of each request's session (plain only).
	turns map[int][]uint64
	now   func() time.Time
}

func newHTTPSender(cfg Config, model string) (*httpSender, error) {
	addr, tls, err := ParseTarget(cfg.Target)
	if err != nil {
		return nil, err
	}
	path := cfg.Path
	if path == "" {
		path = DefaultPath
	}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	return &httpSender{
		client:  defaultHostClient(addr, tls, max(cfg.MaxConcurrency, 1)),
		uri:     strings.TrimSuffix(cfg.Target, "/") + path,
		model:   model,
		timeout: timeout,
		maxBody: cfg.MaxBodyTokens,
		plain:   cfg.Plain,
		now:     time.Now,
	}, nil
}

func (s *httpSender) close() { s.client.CloseIdleConnections() }

// Body returns the request body of r: one user message of "x" × input tokens (capped at
// maxBody when > 0), streaming.
func Body(model string, inputTokens, maxBody uint64) []byte {
	n := inputTokens
	if maxBody > 0 {
		n = min(n, maxBody)
	}
	var b bytes.Buffer
	b.Grow(int(n) + 128) //nolint:gosec // token counts are far below MaxInt
	b.WriteString(`{"model":`)
	m, _ := json.Marshal(model)
	b.Write(m)
	b.WriteString(`,"stream":true,"messages":[{"role":"user","content":"`)
	for range n {
		b.WriteByte('x')
	}
	b.WriteString(`"}]}`)
	return b.Bytes()
}

// PlainBody returns the body a plain OpenAI client sends for r: user messages of
// PlainBytesPerToken × r.InputTokens characters in all (capped at maxBody when > 0), so
// that the gateway's estimate from the body, which it passes on to the engine, is
// r.InputTokens; and max_tokens = r.OutputTokens, streaming. The text is the request's
// session's own — derived from its affinity key, or from its id when it has none — and a
// session's text is one fixed stream, cut into one message per turn at the earlier turns'
// lengths (earlier: their input tokens, ascending; EarlierTurns), so each turn repeats the
// previous turns' messages unchanged and appends one, as a chat client does.
func PlainBody(model string, r *scenario.Request, earlier []uint64, maxBody uint64) []byte {
	n := PlainBytesPerToken * r.InputTokens
	if maxBody > 0 {
		n = min(n, maxBody)
	}
	seed := r.AffinityKey
	if seed == "" {
		seed = r.ID
	}
	var b bytes.Buffer
	b.Grow(int(n) + 160 + 32*len(earlier)) //nolint:gosec // token counts are far below MaxInt
	b.WriteString(`{"model":`)
	m, _ := json.Marshal(model)
	b.Write(m)
	b.WriteString(`,"stream":true,"messages":[`)
	text := sessionText(seed, n)
	from := uint64(0)
	for _, t := range earlier {
		if to := min(PlainBytesPerToken*t, n); to > from {
			userMessage(&b, text[from:to])
			b.WriteByte(',')
			from = to
		}
	}
	userMessage(&b, text[from:])
	b.WriteString(`],"max_tokens":`)
	b.WriteString(strconv.FormatUint(r.OutputTokens, 10))
	b.WriteString(`}`)
	return b.Bytes()
}

func userMessage(b *bytes.Buffer, text []byte) {
	b.WriteString(`{"role":"user","content":"`)
	b.Write(text)
	b.WriteString(`"}`)
}

// EarlierTurns maps each request of m with an affinity key to the input token counts of
// the earlier, shorter turns of its session in manifest order (nil for a session's first
// turn): a plain client sends each turn as one more message after those of the turns
// before it.
func EarlierTurns(m *scenario.Manifest) map[int][]uint64 {
	seen := map[string][]uint64{}
	out := map[int][]uint64{}
	for i := range m.Requests {
		r := &m.Requests[i]
		if r.AffinityKey == "" {
			continue
		}
		prev := seen[r.AffinityKey]
		var mine []uint64
		for _, t := range prev {
			if t < r.InputTokens {
				mine = append(mine, t)
			}
		}
		slices.Sort(mine)
		out[r.Index] = slices.Compact(mine)
		seen[r.AffinityKey] = append(prev, r.InputTokens)
	}
	return out
}

// PlainBytesPerToken is the gateway's estimate of prompt bytes per token for requests
// without x-input-tokens.
const PlainBytesPerToken = 4

// sessionText returns n letters and spaces of the pseudo-random text stream of seed (no
// character needs JSON escaping).
func sessionText(seed string, n uint64) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyz     "
	rng := rand.New(rand.NewPCG(xxh3.HashString(seed), 0x5eed))
	out := make([]byte, n)
	for i := range out {
		out[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return out
}

func (s *httpSender) send(ctx context.Context, r *scenario.Request, sent time.Time) score.Record {
	rec := score.Record{
		Index: r.Index, ID: r.ID, Class: r.Class, AffinityKey: r.AffinityKey, RoutingKey: r.RoutingKey,
		InputTokens: r.InputTokens, WantedOutput: r.OutputTokens,
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(s.uri)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Accept", "text/event-stream")
	if s.plain {
		req.SetBodyRaw(PlainBody(s.model, r, s.turns[r.Index], s.maxBody))
	} else {
		req.Header.Set(wire.HeaderRequestID, r.ID)
		req.Header.Set(wire.HeaderModel, s.model)
		req.Header.Set(wire.HeaderInputTokens, strconv.FormatUint(r.InputTokens, 10))
		req.Header.Set(wire.HeaderOutputTokens, strconv.FormatUint(r.OutputTokens, 10))
		if r.RoutingKey != "" {
			req.Header.Set(wire.HeaderRoutingKey, r.RoutingKey)
		}
		if r.AffinityKey != "" {
			req.Header.Set(wire.HeaderCacheAffinityKey, r.AffinityKey)
		}
		req.SetBodyRaw(Body(s.model, r.InputTokens, s.maxBody))
	}
	resp.StreamBody = true

	if err := s.client.DoDeadline(req, resp, sent.Add(s.timeout)); err != nil {
		rec.Error = err.Error()
		rec.TTLT = s.now().Sub(sent)
		return rec
	}
	rec.Status = resp.StatusCode()
	h := &resp.Header
	rec.Backend = string(h.Peek(wire.HeaderInferenceServerID))
	rec.Cluster = string(h.Peek(wire.HeaderClusterID))
	rec.ErrorCode = string(h.Peek(wire.HeaderErrorCode))
	rec.KV = kvHeaders(h)
	rec.EngineQueued = string(h.Peek(HeaderEngineQueued)) == "true"
	if v := h.Peek(HeaderRetries); len(v) > 0 {
		rec.Retries, _ = strconv.Atoi(string(v))
	}

	// Abort the stream when ctx ends; closeOnce makes the abort and the normal close
	// mutually exclusive and lets the normal path wait for a running abort.
	var once sync.Once
	closeStream := func(err error) {
		once.Do(func() {
			if err != nil {
				if bs, ok := resp.BodyStream().(fasthttp.ReadCloserWithError); ok {
					_ = bs.CloseWithError(err)
					return
				}
			}
			_ = resp.CloseBodyStream()
		})
	}
	stop := context.AfterFunc(ctx, func() { closeStream(ctx.Err()) })
	defer func() {
		stop()
		closeStream(nil)
	}()

	if rec.Status < 200 || rec.Status >= 300 {
		body, err := io.ReadAll(io.LimitReader(bodyReader(resp), maxErrorBody))
		rec.Error = errorMessage(rec.Status, body, err)
		rec.TTLT = s.now().Sub(sent)
		return rec
	}
	s.readStream(bodyReader(resp), sent, &rec)
	return rec
}

// bodyReader returns the response's body stream, or its buffered body when fasthttp
// read it whole.
func bodyReader(resp *fasthttp.Response) io.Reader {
	if bs := resp.BodyStream(); bs != nil {
		return bs
	}
	return bytes.NewReader(resp.Body())
}

func kvHeaders(h *fasthttp.ResponseHeader) *score.KV {
	hit := h.Peek(HeaderKVHit)
	if len(hit) == 0 {
		return nil
	}
	u := func(name string) uint64 {
		v, _ := strconv.ParseUint(string(h.Peek(name)), 10, 64)
		return v
	}
	return &score.KV{
		Hit:            string(hit) == "true",
		ReusedInput:    u(HeaderKVReused),
		UncachedInput:  u(HeaderKVUncached),
		EvictedEntries: u(HeaderKVEvictedEntries),
		EvictedTokens:  u(HeaderKVEvictedTokens),
	}
}

func errorMessage(status int, body []byte, readErr error) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 {
		var inner struct {
			Message string `json:"message"`
		}
		var flat string
		switch {
		case json.Unmarshal(e.Error, &inner) == nil && inner.Message != "":
			msg = inner.Message
		case json.Unmarshal(e.Error, &flat) == nil:
			msg = flat
		}
	}
	if msg == "" && readErr != nil {
		msg = readErr.Error()
	}
	if msg == "" {
		msg = "status " + strconv.Itoa(status)
	}
	return msg
}

// chunk is the part of a streamed chat or text completion event the driver reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	// Responses API text deltas.
	Type  string `json:"type"`
	Delta string `json:"delta"`
}

var errTruncated = errors.New("stream ended before [DONE]")

// readStream reads SSE events until [DONE] or EOF, timing the first content event.
func (s *httpSender) readStream(body io.Reader, sent time.Time, rec *score.Record) {
	br := bufio.NewReaderSize(body, 16<<10)
	defer func() { rec.TTLT = s.now().Sub(sent) }()
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An event longer than the buffer: keep reading until its end.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			continue
		}
		if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			if string(data) == "[DONE]" {
				rec.Completed = true
				_, _ = io.Copy(io.Discard, br) // drain so the connection is reused
				return
			}
			if hasContent(data) {
				if rec.OutputTokens == 0 {
					rec.TTFT = s.now().Sub(sent)
				}
				rec.OutputTokens++
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				rec.Error = err.Error()
			} else if !rec.Completed {
				rec.Error = errTruncated.Error()
			}
			return
		}
	}
}

func hasContent(data []byte) bool {
	if !bytes.Contains(data, []byte(`"content"`)) && !bytes.Contains(data, []byte(`"text"`)) && !bytes.Contains(data, []byte(`"delta"`)) {
		return false
	}
	var c chunk
	if json.Unmarshal(data, &c) != nil {
		return false
	}
	if c.Type == "response.output_text.delta" {
		return c.Delta != ""
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" || ch.Text != "" {
			return true
		}
	}
	return false
}

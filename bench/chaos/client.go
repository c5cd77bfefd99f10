package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Client sends chat completions to the gateway's public listener and classifies each
// answer into one outcome.
type Client struct {
	hc  *http.Client
	tr  *http.Transport
	url string
}

// NewClient returns a client of baseURL keeping up to conns idle connections.
func NewClient(baseURL string, conns int) *Client {
	tr := &http.Transport{
		Proxy:               nil, // loopback only, whatever the environment says
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Client{hc: &http.Client{Transport: tr}, tr: tr, url: strings.TrimSuffix(baseURL, "/") + "/v1/chat/completions"}
}

// Close closes the idle connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Request is one chat completion.
type Request struct {
	Stream bool
	// PromptBytes is the user message's size.
	PromptBytes int
	// OutputTokens asks the mock engine for this many tokens (x-output-tokens; 0: its
	// default).
	OutputTokens int
}

// promptSizes are the prompt sizes the mixed load cycles through.
var promptSizes = [...]int{16, 200, 1500, 6000, 24000}

// MixedRequest is the n-th request of a mixed load: streamed and non-streamed in turn,
// prompts of varied sizes, 4 to 12 output tokens.
func MixedRequest(n uint64) Request {
	return Request{
		Stream:       n%2 == 0,
		PromptBytes:  promptSizes[(n/2)%uint64(len(promptSizes))],
		OutputTokens: 4 + int(n%9),
	}
}

// Body renders r's JSON body.
func (r Request) Body() []byte {
	var b bytes.Buffer
	b.Grow(r.PromptBytes + 128)
	b.WriteString(`{"model":"` + Model + `","stream":` + strconv.FormatBool(r.Stream) + `,"messages":[{"role":"user","content":"`)
	const word = "lorem ipsum "
	for n := 0; n < r.PromptBytes; n += len(word) {
		b.WriteString(word)
	}
	b.WriteString(`"}]}`)
	return b.Bytes()
}

func (c *Client) newRequest(ctx context.Context, r Request) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(r.Body()))
	if err != nil {
		return nil, err //nolint:wrapcheck // names the URL
	}
	req.Header.Set("Content-Type", "application/json")
	if r.OutputTokens > 0 {
		req.Header.Set("X-Output-Tokens", strconv.Itoa(r.OutputTokens))
	}
	return req, nil
}

// Do sends r and waits for its whole answer, at most hang; the answer is classified into
// one outcome. It never returns without one.
func (c *Client) Do(ctx context.Context, r Request, hang time.Duration) Result {
	res := Result{Start: time.Now(), Stream: r.Stream}
	rctx, cancel := context.WithTimeout(ctx, hang)
	defer cancel()
	finish := func(k Kind, err error) Result {
		res.End, res.Kind = time.Now(), k
		if err != nil {
			res.Err = oneLine(err.Error())
			if ctx.Err() != nil {
				res.Kind = KindAborted
			} else if errors.Is(rctx.Err(), context.DeadlineExceeded) {
				res.Kind = KindHung
			}
		}
		return res
	}
	req, err := c.newRequest(rctx, r)
	if err != nil {
		return finish(KindTransport, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return finish(KindTransport, err)
	}
	defer resp.Body.Close()
	res.Status, res.Backend = resp.StatusCode, resp.Header.Get("X-Inference-Server-Id")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		if err != nil && rctx.Err() != nil {
			return finish(KindStatus, err) // hung while reading the error body
		}
		return finish(KindStatus, nil)
	}
	if r.Stream {
		end, err := ReadSSE(resp.Body, nil)
		res.Trailing = end.Trailing
		switch {
		case end.Done:
			return finish(KindOK, nil)
		case end.Error != "":
			return finish(KindStreamError, errors.New(end.Error))
		case err != nil:
			return finish(KindTruncated, err)
		default:
			return finish(KindTruncated, errors.New("stream ended without [DONE]"))
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return finish(KindTruncated, err)
	}
	var answer struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal(body, &answer); err != nil || len(answer.Choices) == 0 {
		return finish(KindTruncated, errors.New("the body is not a chat completion"))
	}
	return finish(KindOK, nil)
}

// SSEEnd is how an event stream ended.
type SSEEnd struct {
	// Done: "data: [DONE]" arrived.
	Done bool
	// Error is the error event's text when the stream ended with one ("" otherwise): an
	// "event: error" or a data event whose JSON has an "error" member.
	Error string
	// Events counts the data events before the end.
	Events int
	// Trailing says data events followed [DONE].
	Trailing bool
}

// ReadSSE reads an event stream until [DONE], an error event, EOF or a read error (which
// it returns); onEvent, if set, is called after each data event with the count so far.
// After [DONE] the rest of the body (the terminating chunk) is read too.
func ReadSSE(r io.Reader, onEvent func(n int)) (SSEEnd, error) {
	var end SSEEnd
	br := bufio.NewReaderSize(r, 64<<10)
	errorEvent := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: skip the rest of it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			line = nil
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(line, []byte("event:")):
			errorEvent = bytes.Equal(bytes.TrimSpace(line[len("event:"):]), []byte("error"))
		case bytes.HasPrefix(line, []byte("data:")):
			data := bytes.TrimSpace(line[len("data:"):])
			if bytes.Equal(data, []byte("[DONE]")) {
				end.Done = true
				rest, _ := io.ReadAll(io.LimitReader(br, 64<<10))
				end.Trailing = bytes.Contains(rest, []byte("data:"))
				return end, nil
			}
			if msg, ok := errorMessage(data); ok || errorEvent {
				if msg == "" {
					msg = string(data)
				}
				end.Error = oneLine(msg)
				return end, nil
			}
			end.Events++
			if onEvent != nil {
				onEvent(end.Events)
			}
		case len(line) == 0:
			errorEvent = false // an event ends at a blank line
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return end, nil
			}
			return end, err
		}
	}
}

// errorMessage reports whether data is a JSON object with an "error" member, and the
// error's message if it has one.
func errorMessage(data []byte) (string, bool) {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return "", false
	}
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &v) != nil || len(v.Error) == 0 || string(v.Error) == "null" {
		return "", false
	}
	var detail struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(v.Error, &detail) == nil && detail.Message != "" {
		return detail.Message, true
	}
	return string(v.Error), true
}

// Stream is one streamed request held open by a scenario.
type Stream struct {
	// Backend and Status are set once the response headers arrived (before First closes).
	Backend string
	Status  int
	first   chan struct{}
	done    chan struct{}
	cancel  context.CancelFunc
	// End, EndAt and Kind are set once Done is closed.
	End   SSEEnd
	EndAt time.Time
	Kind  Kind
	Err   error
}

// First is closed at the stream's first data event (or at its end, whichever is first).
func (s *Stream) First() <-chan struct{} { return s.first }

// Done is closed when the stream has ended.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Cancel closes the stream from the client's side.
func (s *Stream) Cancel() { s.cancel() }

// Open starts streamed request r, held open at most bound; the stream ends by itself,
// on Cancel or at the bound (then it is hung).
func (c *Client) Open(ctx context.Context, r Request, bound time.Duration) *Stream {
	r.Stream = true
	sctx, cancel := context.WithTimeout(ctx, bound)
	s := &Stream{first: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(s.done)
		defer cancel()
		firstOnce := func() {
			select {
			case <-s.first:
			default:
				close(s.first)
			}
		}
		defer firstOnce()
		finish := func(k Kind, err error) {
			s.EndAt, s.Kind, s.Err = time.Now(), k, err
			if err != nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
				s.Kind = KindHung
			}
		}
		req, err := c.newRequest(sctx, r)
		if err != nil {
			finish(KindTransport, err)
			return
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			finish(KindTransport, err)
			return
		}
		defer resp.Body.Close()
		s.Status, s.Backend = resp.StatusCode, resp.Header.Get("X-Inference-Server-Id")
		if resp.StatusCode != http.StatusOK {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			finish(KindStatus, errors.New("status "+strconv.Itoa(resp.StatusCode)))
			return
		}
		s.End, err = ReadSSE(resp.Body, func(int) { firstOnce() })
		switch {
		case s.End.Done:
			finish(KindOK, nil)
		case s.End.Error != "":
			finish(KindStreamError, nil)
		case err != nil:
			finish(KindTruncated, err)
		default:
			finish(KindTruncated, errors.New("stream ended without [DONE]"))
		}
	}()
	return s
}

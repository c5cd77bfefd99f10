package mock_test

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/engines/mock"
)

// harness is one engine on an in-memory listener with a client.
type harness struct {
	t      testing.TB
	eng    *mock.Engine
	ln     *fasthttputil.InmemoryListener // for raw connections
	client *fasthttp.Client
	served chan error
}

func start(tb testing.TB, cfg mock.Config) *harness {
	tb.Helper()
	return startWith(tb, cfg, mock.Deps{})
}

// startWith is start with the engine's dependencies.
func startWith(tb testing.TB, cfg mock.Config, deps mock.Deps) *harness {
	tb.Helper()
	eng, err := mock.New(cfg, deps)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	ln := fasthttputil.NewInmemoryListener()
	h := &harness{t: tb, eng: eng, ln: ln, served: make(chan error, 1)}
	h.client = &fasthttp.Client{
		Dial:                func(string) (net.Conn, error) { return ln.Dial() },
		MaxConnsPerHost:     4096,
		MaxIdleConnDuration: time.Minute,
		// One write per request: the server answers an oversize request (413, 431) and
		// closes at once, and a request written in two parts then fails on its second
		// part before its answer is read.
		WriteBufferSize: 64 << 10,
	}
	go func() { h.served <- eng.Serve(ln) }()
	return h
}

// stop shuts everything down and lets idle cleaners exit (inside synctest: a virtual minute).
func (h *harness) stop() {
	h.client.CloseIdleConnections()
	if err := h.eng.Close(); err != nil {
		h.t.Errorf("Close: %v", err)
	}
	if err := <-h.served; err != nil {
		h.t.Errorf("Serve: %v", err)
	}
	time.Sleep(time.Minute)
}

type call struct {
	method  string
	path    string
	body    string
	headers map[string]string
}

// do performs a buffered request.
func (h *harness) do(c call) *fasthttp.Response {
	h.t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://engine" + c.path)
	req.Header.SetMethod(c.method)
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	req.SetBodyString(c.body)
	resp := &fasthttp.Response{}
	err := h.client.Do(req, resp)
	if err != nil {
		// The server closes the connection after a 413/431; a POST that raced onto that
		// pooled connection is not retried by the client, so retry once on a new one.
		h.client.CloseIdleConnections()
		resp.Reset()
		err = h.client.Do(req, resp)
	}
	if err != nil {
		h.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	return resp
}

// sseEvent is one received SSE data line with its arrival time.
type sseEvent struct {
	at    time.Time
	event string
	data  string
}

// stream performs a streaming request and returns the response headers and every event.
// The error is the body read error (nil on a clean end).
func (h *harness) stream(c call) (*fasthttp.ResponseHeader, []sseEvent, error) {
	h.t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://engine" + c.path)
	req.Header.SetMethod(c.method)
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	req.SetBodyString(c.body)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.StreamBody = true
	if err := h.client.Do(req, resp); err != nil {
		h.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	hdr := &fasthttp.ResponseHeader{}
	resp.Header.CopyTo(hdr)
	var events []sseEvent
	br := bufio.NewReader(resp.BodyStream())
	event := ""
	var rerr error
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err.Error() != "EOF" {
				rerr = err
			}
			break
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			events = append(events, sseEvent{at: time.Now(), event: event, data: strings.TrimPrefix(line, "data: ")})
			event = ""
		}
	}
	if err := resp.CloseBodyStream(); err != nil && rerr == nil {
		rerr = err
	}
	return hdr, events, rerr
}

func chatBody(stream bool, content string) string {
	b, _ := json.Marshal(map[string]any{
		"model":    "m",
		"stream":   stream,
		"messages": []map[string]string{{"role": "user", "content": content}},
	})
	return string(b)
}

func hdrs(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

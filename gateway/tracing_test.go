package gateway_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/tracing"
	"github.com/switchyard/switchyard/pylon"
)

// One streamed request through an in-process gateway, pylon and mock engine, all three
// tracing to in-memory exporters: the client's trace id is the trace id of every
// span, gateway.request is the child of the client's span, gateway.route, gateway.attempt
// and gateway.stream are its children, pylon.relay is the attempt's child, the engine gets
// a traceparent of the same trace whose parent is the relay span, and the engine's own
// engine.generate span is the relay's child.
func TestTraceOneStreamedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gwExp, pyExp, enExp := tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()
		gwTP := tracing.NewProvider(sdktrace.NewSimpleSpanProcessor(gwExp), 1, "gateway", "test")
		pyTP := tracing.NewProvider(sdktrace.NewSimpleSpanProcessor(pyExp), 1, "pylon", "test")
		enTP := tracing.NewProvider(sdktrace.NewSimpleSpanProcessor(enExp), 1, "engine", "test")
		defer func() { _ = gwTP.Shutdown(context.Background()) }()
		defer func() { _ = pyTP.Shutdown(context.Background()) }()
		defer func() { _ = enTP.Shutdown(context.Background()) }()

		h := newHarnessDeps(t, gateway.Config{}, `{"default":"wait-and-widen"}`, gateway.Deps{Tracer: gwTP.Tracer("gateway")})
		f := &fullStack{h: h}
		var engineDone sync.WaitGroup
		srv := &fasthttp.Server{}
		t.Cleanup(func() { // after the pylon has stopped (LIFO): its connections are closed
			_ = srv.Shutdown()
			engineDone.Wait()
		})
		t.Cleanup(f.close)

		// The engine: the mock engine's handler behind one that notes each completion's
		// traceparent.
		eng, err := mock.New(mock.Config{NumTokens: 5, TokenDelay: time.Millisecond}, mock.Deps{Tracer: enTP.Tracer("engine")})
		if err != nil {
			t.Fatal(err)
		}
		f.engines = append(f.engines, eng)
		var (
			mu           sync.Mutex
			engineParent []string
		)
		srv.Handler = func(ctx *fasthttp.RequestCtx) {
			if ctx.IsPost() {
				mu.Lock()
				engineParent = append(engineParent, string(ctx.Request.Header.Peek("traceparent")))
				mu.Unlock()
			}
			eng.Handler(ctx)
		}
		eln := f.listener("e1")
		engineDone.Go(func() { _ = srv.Serve(eln) })

		cfg := pylon.DefaultConfig()
		cfg.UpstreamBaseURL, cfg.Gateways, cfg.AdvertiseURL = "http://e1:80", []string{"http://gateway"}, "http://p1:80"
		cfg.ID, cfg.ModelNames, cfg.InitialInputTPS, cfg.PinInputTPS = "p1", []string{"dummy-model"}, 10_000, true
		p, err := pylon.New(cfg, pylon.Deps{
			Listener: f.listener("p1"), AdminListener: f.listener("p1-admin"), Dial: f.dial,
			Logger: slog.New(slog.DiscardHandler), Tracer: pyTP.Tracer("pylon"),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		f.cancels = append(f.cancels, cancel)
		f.done.Add(1)
		go func() {
			defer f.done.Done()
			if err := p.Run(ctx); err != nil {
				t.Errorf("pylon: %v", err)
			}
		}()
		time.Sleep(time.Second) // registration and probes settle
		synctest.Wait()

		const (
			clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
			clientSpan  = "00f067aa0ba902b7"
		)
		r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"x"}]}`),
			map[string]string{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01", "tracestate": "vendor=1"})
		if r.status != 200 || !strings.Contains(r.body, "[DONE]") {
			t.Fatalf("got %d: %s", r.status, r.body)
		}
		synctest.Wait() // the stream's end reaches both binaries

		spans := map[string]tracetest.SpanStub{}
		for _, s := range append(append(gwExp.GetSpans(), pyExp.GetSpans()...), enExp.GetSpans()...) {
			if _, dup := spans[s.Name]; dup {
				t.Errorf("two %s spans", s.Name)
			}
			spans[s.Name] = s
			if got := s.SpanContext.TraceID().String(); got != clientTrace {
				t.Errorf("%s: trace id %s, want the client's %s", s.Name, got, clientTrace)
			}
		}
		want := map[string]string{ // span → its parent's name
			"gateway.request": "client", "gateway.route": "gateway.request", "gateway.attempt": "gateway.request",
			"gateway.stream": "gateway.request", "pylon.relay": "gateway.attempt", "engine.generate": "pylon.relay",
		}
		for name, parent := range want {
			s, ok := spans[name]
			if !ok {
				t.Errorf("no %s span (got %v)", name, keys(spans))
				continue
			}
			wantParent := clientSpan
			if parent != "client" {
				wantParent = spans[parent].SpanContext.SpanID().String()
			}
			if got := s.Parent.SpanID().String(); got != wantParent {
				t.Errorf("%s: parent span %s, want %s's %s", name, got, parent, wantParent)
			}
		}
		if got := spans["gateway.request"].Parent.TraceState().String(); got != "vendor=1" {
			t.Errorf("the client's tracestate reached the gateway as %q", got)
		}
		attr := func(span, key string) string {
			for _, kv := range spans[span].Attributes {
				if string(kv.Key) == key {
					return kv.Value.String()
				}
			}
			return ""
		}
		for _, c := range []struct{ span, key, want string }{
			{"gateway.route", "switchyard.outcome", "granted"},
			{"gateway.route", "switchyard.backend", "p1"},
			{"gateway.route", "switchyard.rank_depth", "1"}, // the best-ranked candidate
			{"gateway.attempt", "switchyard.backend", "p1"},
			{"gateway.attempt", "http.response.status_code", "200"},
			{"gateway.stream", "switchyard.stream.end", "completed"},
			{"gateway.stream", "switchyard.stream.bytes", itoa(len(r.body))},
			{"gateway.request", "http.response.status_code", "200"},
			{"pylon.relay", "http.response.status_code", "200"},
		} {
			if got := attr(c.span, c.key); got != c.want {
				t.Errorf("%s %s = %q, want %q", c.span, c.key, got, c.want)
			}
		}
		for _, c := range []struct{ span, key string }{{"gateway.stream", "switchyard.stream.events"}, {"pylon.relay", "gen_ai.usage.output_tokens"}} {
			if v := attr(c.span, c.key); v == "" || v == "0" {
				t.Errorf("%s %s = %q, want a count", c.span, c.key, v)
			}
		}

		mu.Lock()
		defer mu.Unlock()
		if len(engineParent) != 1 {
			t.Fatalf("the engine got %d completions, want 1", len(engineParent))
		}
		var eh fasthttp.RequestHeader
		eh.Set("traceparent", engineParent[0])
		sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), &eh))
		if !sc.IsValid() || sc.TraceID().String() != clientTrace {
			t.Errorf("the engine got traceparent %q, want one of trace %s", engineParent[0], clientTrace)
		}
		if relay := spans["pylon.relay"].SpanContext.SpanID(); sc.SpanID() != relay {
			t.Errorf("the engine's parent span is %s, want the pylon's relay span %s", sc.SpanID(), relay)
		}
	})
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func itoa(n int) string { return strconv.Itoa(n) }

// Requests refused before routing get a gateway.request span too, with no children: the
// client's span as parent, the answer's status and error code. A request the scheduler
// refuses (input-work admission) has its error code on the request span and a rejected
// gateway.route. A refused request whose caller did not sample its trace records nothing.
func TestTraceRefusedRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := tracing.NewProvider(sdktrace.NewSimpleSpanProcessor(exp), 1, "gateway", "test")
		defer func() { _ = tp.Shutdown(context.Background()) }()
		h := newHarnessDeps(t, gateway.Config{MaxReplayBodyBytes: 1024},
			`{"default":"power-of-n","models":{"m":{"algorithm":"power-of-n","max_input_work_seconds":0.5}}}`,
			gateway.Deps{Tracer: tp.Tracer("gateway")})
		h.register(h.pylon("p", "p", load.Load{InputTPS: 100, QueuedInputTokens: 100}, nil))
		exp.Reset()

		const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		chat := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)
		for i, c := range []struct {
			name, method string
			body         []byte
			headers      map[string]string
			status       int
			code         string
			children     []string // spans under gateway.request
		}{
			{"bad body", "POST", []byte(`{"model":`), nil, 400, "invalid_request", nil},
			// Small enough that the client writes the whole request at once: the gateway
			// answers 413 and closes without reading a body over the limit, and a client
			// still writing would see the connection closed instead of the answer.
			{"too large", "POST", []byte(`{"model":"m","pad":"` + strings.Repeat("x", 1500) + `"}`), nil, 413, "request_too_large", nil},
			{"unknown model", "POST", []byte(`{"model":"nope","messages":[]}`), map[string]string{"x-input-tokens": "1"}, 404, "no_eligible_candidates", nil},
			{"bad routing method", "POST", chat, map[string]string{"x-routing-method": "no-such-algorithm"}, 400, "invalid_request", nil},
			{"method", "GET", nil, nil, 405, "method_not_allowed", nil},
			{"admission", "POST", chat, map[string]string{"x-input-tokens": "50"}, 503, "overloaded_error", []string{"gateway.route"}},
		} {
			hdr := map[string]string{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01", "x-request-id": "req-" + itoa(i)}
			for k, v := range c.headers {
				hdr[k] = v
			}
			if r := h.do(c.method, "/v1/chat/completions", c.body, hdr); r.status != c.status || !strings.Contains(r.body, `"code":"`+c.code+`"`) {
				t.Fatalf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
			}
			synctest.Wait()
			spans := exp.GetSpans()
			exp.Reset()
			var root tracetest.SpanStub
			var children []string
			for _, s := range spans {
				if s.Name == "gateway.request" {
					root = s
				} else {
					children = append(children, s.Name)
				}
			}
			if root.Name == "" {
				t.Errorf("%s: no gateway.request span (got %d spans)", c.name, len(spans))
				continue
			}
			if root.SpanContext.TraceID().String() != clientTrace || root.Parent.SpanID().String() != clientSpan || root.SpanKind != trace.SpanKindServer {
				t.Errorf("%s: span in trace %s under %s (kind %v), want the client's %s under %s, a server span", c.name,
					root.SpanContext.TraceID(), root.Parent.SpanID(), root.SpanKind, clientTrace, clientSpan)
			}
			attrs := map[string]string{}
			for _, kv := range root.Attributes {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			for k, want := range map[string]string{
				"http.response.status_code": itoa(c.status), "switchyard.error_code": c.code,
				"switchyard.request_id": "req-" + itoa(i), "http.request.method": c.method, "url.path": "/v1/chat/completions",
			} {
				if attrs[k] != want {
					t.Errorf("%s: %s = %q, want %q (%v)", c.name, k, attrs[k], want, attrs)
				}
			}
			if wantErr := c.status >= 500; (root.Status.Code == codes.Error) != wantErr {
				t.Errorf("%s: span status %v, want an error: %v", c.name, root.Status, wantErr)
			}
			if !slices.Equal(children, c.children) {
				t.Errorf("%s: other spans %v, want %v", c.name, children, c.children)
			}
		}

		// Not sampled by the caller: no span.
		r := h.do("POST", "/v1/chat/completions", []byte(`{"model":`), map[string]string{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-00"})
		synctest.Wait()
		if r.status != 400 || len(exp.GetSpans()) != 0 {
			t.Errorf("unsampled refused request: %d, %d spans; want 400 and none", r.status, len(exp.GetSpans()))
		}
	})
}

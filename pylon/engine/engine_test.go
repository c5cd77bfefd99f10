package engine_test

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/pylon/engine"
	"github.com/switchyard/switchyard/pylon/stats"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's process-wide date refresher and idle cleaners exit within one idle period.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	)
}

func TestParseLine(t *testing.T) {
	t.Parallel()
	u := func(v uint64) *stats.ConcurrencyReport { return &stats.ConcurrencyReport{MaxEngineConcurrency: v} }
	for line, want := range map[string]engine.Event{
		`{"v":1,"type":"ping"}`: {Type: "ping"},
		`{"v":1,"type":"ping","model":"llama","max_engine_concurrency":25}`: {Type: "ping", Model: "llama", Concurrency: u(25)},
		`{"v":1,"type":"ping","model":"llama","max_engine_concurrency":0}`:  {Type: "ping", Model: "llama", Concurrency: u(0)},
		`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":5}`: {
			Type: "stats", Model: "m", Stats: &stats.RequestEvent{RequestID: "r", TokensProcessed: 5},
		},
		` {"v":1,"type":"stats","request_id":"r","model":"m","finished":true}` + "\r\n": {
			Type: "stats", Model: "m", Stats: &stats.RequestEvent{RequestID: "r", Finished: true},
		},
	} {
		got, err := engine.ParseLine([]byte(line))
		if err != nil {
			t.Errorf("ParseLine(%s): %v", line, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ParseLine(%s) (-want +got):\n%s", line, diff)
		}
	}
	for line, reason := range map[string]string{
		`{`:                     engine.ReasonJSON,
		`{"type":"ping"}`:       engine.ReasonVersion,
		`{"v":2,"type":"ping"}`: engine.ReasonVersion,
		`{"v":1,"type":"pong"}`: engine.ReasonType,
		`{"v":1,"type":"stats","model":"m","tokens_processed":1}`:                   engine.ReasonMissingField,
		`{"v":1,"type":"stats","request_id":"r","model":"m"}`:                       engine.ReasonNoCounter,
		`{"v":1,"type":"ping","max_engine_concurrency":3}`:                          engine.ReasonMissingField,
		`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":-1}`: engine.ReasonJSON,
	} {
		_, err := engine.ParseLine([]byte(line))
		ie, ok := errors.AsType[*engine.InvalidEventError](err)
		if !ok || ie.Reason != reason || !errors.Is(err, engine.ErrInvalidEvent) {
			t.Errorf("ParseLine(%s) = %v, want reason %s", line, err, reason)
		}
	}
}

func TestParseKV(t *testing.T) {
	t.Parallel()
	kv, model, err := engine.ParseKV([]byte(`{"model":"m","kv_cache_capacity_tokens":100,"kv_cache_used_tokens":30,"kv_cache_free_tokens":70,"extra":1}`))
	if err != nil || model != "m" || kv != (stats.KVStats{CapacityTokens: 100, UsedTokens: 30, FreeTokens: 70}) {
		t.Errorf("ParseKV: %+v %q %v", kv, model, err)
	}
	if _, _, err := engine.ParseKV([]byte(`{"model":"m"}`)); !errors.Is(err, engine.ErrBadKVStats) {
		t.Errorf("missing fields: %v", err)
	}
}

type recordingSink struct {
	mu    sync.Mutex
	stats []stats.RequestEvent
	pings []uint64
	kv    []stats.KVStats
}

func (s *recordingSink) EngineStats(_ string, ev *stats.RequestEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = append(s.stats, *ev)
}

func (s *recordingSink) EnginePing(_ string, r *stats.ConcurrencyReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pings = append(s.pings, r.MaxEngineConcurrency)
}

func (s *recordingSink) EngineKV(_ string, kv stats.KVStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv = append(s.kv, kv)
}

func (*recordingSink) EngineMetrics(map[string]stats.EngineMetrics) {}

func serve(t *testing.T, h fasthttp.RequestHandler) (*fasthttp.HostClient, func()) {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	c := &fasthttp.HostClient{Addr: "engine", Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	return c, func() {
		c.CloseIdleConnections()
		_ = srv.Shutdown()
		<-done
	}
}

func TestStatsStreamCountsAndReconnects(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	conns := 0
	client, stop := serve(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		conns++
		n := conns
		mu.Unlock()
		ctx.SetContentType("application/x-ndjson")
		if n == 1 {
			ctx.SetBodyString("{\"v\":1,\"type\":\"ping\",\"model\":\"m\",\"max_engine_concurrency\":25}\nnot json\n\n" +
				"{\"v\":1,\"type\":\"stats\",\"request_id\":\"r\",\"model\":\"m\",\"tokens_processed\":4}\n")
			return
		}
		ctx.SetBodyString("{\"v\":1,\"type\":\"ping\",\"model\":\"m\",\"max_engine_concurrency\":0}")
	})
	defer stop()
	sink := &recordingSink{}
	set := metrics.NewSet()
	ctx, cancel := context.WithCancel(t.Context())
	s := &engine.StatsStream{
		Client: client, BaseURL: "http://engine", Path: "/pylon/v1/stats/stream", Mode: engine.ModeRequired,
		Sink: sink, Logger: discard(), Metrics: engine.StreamMetrics{Set: set, Prefix: "pylon_"},
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		sink.mu.Lock()
		n := len(sink.pings)
		sink.mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.pings) < 2 || sink.pings[0] != 25 || sink.pings[1] != 0 {
		t.Errorf("pings %v, want [25 0 ...]", sink.pings)
	}
	if diff := cmp.Diff([]stats.RequestEvent{{RequestID: "r", TokensProcessed: 4}}, sink.stats, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	var b strings.Builder
	set.WritePrometheus(&b)
	for _, want := range []string{`pylon_engine_stats_stream_invalid_events_total{reason="json"} 1`, `pylon_engine_stats_stream_events_total{type="stats"} 1`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
}

func TestStatsStreamAutoFallback(t *testing.T) {
	t.Parallel()
	client, stop := serve(t, func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusNotFound) })
	defer stop()
	fellBack := false
	s := &engine.StatsStream{
		Client: client, BaseURL: "http://engine", Path: "/pylon/v1/stats/stream", Mode: engine.ModeAuto,
		Sink: &recordingSink{}, Logger: discard(), OnFallback: func() { fellBack = true },
	}
	if err := s.Run(t.Context()); !errors.Is(err, engine.ErrStreamUnsupported) || !fellBack {
		t.Errorf("Run = %v, fell back %v", err, fellBack)
	}
	off := &engine.StatsStream{Mode: engine.ModeOff}
	if err := off.Run(t.Context()); err != nil {
		t.Errorf("off: %v", err)
	}
}

func FuzzParseLine(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := engine.ParseLine(line)
		if err != nil {
			if !errors.Is(err, engine.ErrInvalidEvent) {
				t.Fatalf("error %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		if ev.Type == engine.EventStats && (ev.Stats == nil || ev.Stats.RequestID == "" || ev.Model == "") {
			t.Fatalf("accepted an incomplete stats event: %+v", ev)
		}
		if ev.Concurrency != nil && ev.Model == "" {
			t.Fatalf("concurrency without model: %+v", ev)
		}
	})
}

func FuzzParseMetrics(f *testing.F) {
	f.Fuzz(func(t *testing.T, text []byte) {
		for _, d := range []string{engine.DialectVLLM, engine.DialectSGLang} {
			got, err := engine.ParseMetrics(d, text)
			if err != nil {
				if !errors.Is(err, engine.ErrBadExposition) {
					t.Fatalf("unexpected error class: %v", err)
				}
				continue
			}
			for _, m := range got {
				for _, v := range []float64{m.Running, m.Waiting, m.PromptTokensTotal, m.GenerationTokensTotal} {
					if v < 0 || math.IsInf(v, 0) {
						t.Fatalf("negative or infinite figure: %+v", m)
					}
				}
				if m.KVUsage < 0 || m.KVUsage > 1 || m.MeanPromptTokens < 0 || math.IsInf(m.MeanPromptTokens, 0) {
					t.Fatalf("usage or mean out of range: %+v", m)
				}
			}
		}
	})
}

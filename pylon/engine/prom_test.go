package engine_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/pylon/engine"
	"github.com/switchyard/switchyard/pylon/stats"
)

const (
	llama = "meta-llama/Llama-3.1-8B-Instruct"
	qwen  = "Qwen/Qwen2.5-7B-Instruct"
	// The fixtures' engine: 3 running, 2 waiting, 2 340 blocks × 16 tokens of KV cache at
	// 25 % use, 12 217 requests with 4 216 800 prompt tokens between them.
	capacity   = 2340 * 16
	meanPrompt = 4216800.0 / 12217
)

var nan = math.NaN()

// realExpositions are the fixtures in the shape vLLM and SGLang expose, and the figures
// each must give.
var realExpositions = []struct {
	file, dialect string
	want          map[string]engine.Figures
}{
	// vLLM 0.6 (V0 engine) behind its API server process: Prometheus' multiprocess mode
	// (no _created series, "Multiprocess metric" help), model_name only,
	// gpu_cache_usage_perc, swapped requests, cache_config_info without any model label.
	{"vllm_v0.6_multiproc.txt", engine.DialectVLLM, map[string]engine.Figures{llama: {
		Running: 3, Waiting: 2, KVUsage: 0.25, KVCapacityTokens: capacity, PromptTokensTotal: 4219857, GenerationTokensTotal: 6531002,
		CounterSeries: 2, MeanPromptTokens: meanPrompt, Ranks: 1,
	}}},
	// vLLM 0.10 (V1 engine), one API server: engine="0" labels, _created series next to
	// every counter and histogram, kv_cache_usage_perc beside its deprecated twin, the
	// cache_config_info gauge with num_gpu_blocks and block_size labels and no model_name.
	{"vllm_v0.10.txt", engine.DialectVLLM, map[string]engine.Figures{llama: {
		Running: 3, Waiting: 2, KVUsage: 0.25, KVCapacityTokens: capacity, PromptTokensTotal: 4219857, GenerationTokensTotal: 6531002,
		CountersCreated: 1.7541168083172557e+09, CounterSeries: 2, MeanPromptTokens: meanPrompt, Ranks: 1,
	}}},
	// vLLM 0.10 with two data-parallel engines (engine="0" and "1"): counts, counters and
	// KV capacity sum over the engines.
	{"vllm_v0.10_dp2.txt", engine.DialectVLLM, map[string]engine.Figures{llama: {
		Running: 3, Waiting: 2, KVUsage: 0.25, KVCapacityTokens: capacity, PromptTokensTotal: 4219857, GenerationTokensTotal: 6531002,
		CountersCreated: 1.7541168083193471e+09, CounterSeries: 4, MeanPromptTokens: meanPrompt, Ranks: 2,
	}}},
	// SGLang 0.4: model_name only and no max_total_num_tokens: the capacity follows from
	// num_used_tokens / token_usage.
	{"sglang_v0.4.txt", engine.DialectSGLang, map[string]engine.Figures{qwen: {
		Running: 3, Waiting: 2, KVUsage: 0.25, KVCapacityTokens: capacity, PromptTokensTotal: 4216800, GenerationTokensTotal: 6531002,
		CounterSeries: 2, MeanPromptTokens: meanPrompt, Ranks: 1,
	}}},
	// SGLang 0.5: engine_type, tp_rank and pp_rank labels on the scheduler's gauges,
	// max_total_num_tokens, a NaN gauge (max_running_requests_under_SLO).
	{"sglang_v0.5.txt", engine.DialectSGLang, map[string]engine.Figures{qwen: {
		Running: 3, Waiting: 2, KVUsage: 0.25, KVCapacityTokens: capacity, PromptTokensTotal: 4216800, GenerationTokensTotal: 6531002,
		CounterSeries: 2, MeanPromptTokens: meanPrompt, Ranks: 1,
	}}},
	// SGLang 0.5 with two data-parallel ranks and metrics from every scheduler: the tensor
	// parallel ranks of one dp_rank repeat its figures (taken once), the dp ranks sum.
	{"sglang_v0.5_dp2.txt", engine.DialectSGLang, map[string]engine.Figures{qwen: {
		Running: 3, Waiting: 2, KVUsage: 0.25, KVCapacityTokens: capacity, PromptTokensTotal: 4216800, GenerationTokensTotal: 6531002,
		CounterSeries: 2, MeanPromptTokens: meanPrompt, Ranks: 2,
	}}},
	// Label values with escaped quotes, backslashes and newlines; NaN, +Inf and -Inf
	// samples (ignored: the second model has no usable series left); a timestamp; the
	// engine-wide cache_config_info.
	{"vllm_edge.txt", engine.DialectVLLM, map[string]engine.Figures{"team \"a\"\\llama\nv2": {
		Running: 3, Waiting: 2, KVUsage: 0.25, KVCapacityTokens: capacity, PromptTokensTotal: nan, GenerationTokensTotal: 6531002,
		CounterSeries: 1, Ranks: 1,
	}}},
	// No series names a model: the figures are keyed "" (every model).
	{"vllm_no_model_name.txt", engine.DialectVLLM, map[string]engine.Figures{"": {
		Running: 3, Waiting: 2, KVUsage: 0.25, KVCapacityTokens: capacity, PromptTokensTotal: nan, GenerationTokensTotal: nan, Ranks: 1,
	}}},
	// Earlier recordings.
	{"vllm_metrics.txt", engine.DialectVLLM, map[string]engine.Figures{llama: {
		Running: 12, Waiting: 3, KVUsage: 0.4375, KVCapacityTokens: 2048 * 16, PromptTokensTotal: 1234567, GenerationTokensTotal: 98765,
		CounterSeries: 2, Ranks: 1,
	}}},
	{"sglang_metrics.txt", engine.DialectSGLang, map[string]engine.Figures{qwen: {
		Running: 7, Waiting: 5, KVUsage: 104857.0 / 419430, KVCapacityTokens: 419430, PromptTokensTotal: 5.5e6, GenerationTokensTotal: 321000,
		CounterSeries: 2, Ranks: 1,
	}}},
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var approx = cmp.Options{cmpopts.EquateNaNs(), cmpopts.EquateApprox(0, 1e-9)}

func TestParseRealExpositions(t *testing.T) {
	t.Parallel()
	for _, tt := range realExpositions {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := engine.ParseMetrics(tt.dialect, readFixture(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, approx); diff != "" {
				t.Errorf("figures (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseMetricsErrors(t *testing.T) {
	t.Parallel()
	if _, err := engine.ParseMetrics("trt", nil); !errors.Is(err, engine.ErrUnknownDialect) {
		t.Errorf("unknown dialect: %v", err)
	}
	for name, text := range map[string]string{
		"unclosed labels":   "vllm:num_requests_running{model_name=\"m\" 1\n",
		"no value":          "vllm:num_requests_running{model_name=\"m\"}\n",
		"second TYPE":       "# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_running gauge\n",
		"unknown type":      "# TYPE vllm:num_requests_running info\n",
		"bad value":         "vllm:num_requests_running 1x\n",
		"duplicate label":   "vllm:num_requests_running{a=\"1\",a=\"2\"} 1\n",
		"invalid utf8 name": "vllm:num_requests_running{model_name=\"\xff\"} 1\n",
	} {
		if _, err := engine.ParseMetrics(engine.DialectVLLM, []byte(text)); !errors.Is(err, engine.ErrBadExposition) {
			t.Errorf("%s: %v, want ErrBadExposition", name, err)
		}
	}
	got, err := engine.ParseMetrics(engine.DialectVLLM, []byte("vllm:num_requests_running{model_name=\"m\"} 4")) // no final newline
	if err != nil || got["m"].Running != 4 {
		t.Errorf("without a final newline: %+v %v", got, err)
	}
	got, err = engine.ParseMetrics(engine.DialectVLLM, nil)
	if err != nil || len(got) != 1 || !math.IsNaN(got[""].Running) {
		t.Errorf("empty body: %+v %v, want one engine-wide entry with nothing known", got, err)
	}
}

// fixtureServer answers /metrics with body() and counts scrapes.
type fixtureServer struct {
	mu   sync.Mutex
	body []byte
}

func (s *fixtureServer) set(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = b
}

func (s *fixtureServer) handle(ctx *fasthttp.RequestCtx) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(ctx.Request.Header.Peek("Accept")) != "text/plain; version=0.0.4" {
		ctx.SetStatusCode(fasthttp.StatusNotAcceptable)
		return
	}
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	ctx.SetBody(s.body)
}

// metricsSink keeps the scrapes the poller hands over.
type metricsSink struct {
	recordingSink
	scrapes []map[string]stats.EngineMetrics
}

func (s *metricsSink) EngineMetrics(m map[string]stats.EngineMetrics) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrapes = append(s.scrapes, m)
}

// The published stats of every real exposition: the aggregate fed two scrapes one second
// apart (no traffic in between) publishes the engine's running and waiting counts, its KV
// capacity and use, queued work priced at the engine's mean prompt, and no output rate.
func TestPublishedStatsFromRealExpositions(t *testing.T) {
	t.Parallel()
	for _, tt := range realExpositions[:6] {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			srv := &fixtureServer{body: readFixture(t, tt.file)}
			client, stop := serve(t, srv.handle)
			defer stop()
			now := t0
			sink := &metricsSink{}
			p := &engine.Poller{Client: client, BaseURL: "http://engine", Path: "/metrics", Sink: sink, Logger: discard(), Dialect: tt.dialect, Now: func() time.Time { return now }}
			agg := stats.NewAggregate("served", 1, stats.Options{})
			for range 2 {
				if err := p.Once(); err != nil {
					t.Fatal(err)
				}
				for _, m := range sink.scrapes[len(sink.scrapes)-1] {
					agg.Apply(&stats.Update{Generation: 1, Metrics: &m}, now)
				}
				now = now.Add(time.Second)
			}
			l := agg.Load(now)
			want := struct{ running, queue, queued, capacity, used uint64 }{3, 2, uint64(math.Round(2 * meanPrompt)), capacity, capacity / 4}
			got := struct{ running, queue, queued, capacity, used uint64 }{l.RunningRequests, l.QueueSize, l.QueuedInputTokens, l.KVCapacityTokens, l.KVUsedTokens}
			if got != want || l.OutputTPS != 0 || l.InputTPS != 0 {
				t.Errorf("published %+v output_tps %v input_tps %v, want %+v and no rates", got, l.OutputTPS, l.InputTPS, want)
			}
		})
	}
}

var t0 = time.Date(2025, 8, 2, 6, 40, 8, 0, time.UTC)

// BenchmarkParseMetrics measures one scrape's parse of a vLLM 0.10 exposition (about
// 120 lines, 11 KB; real ones with every histogram run to several hundred lines).
func BenchmarkParseMetrics(b *testing.B) {
	text, err := os.ReadFile(filepath.Join("testdata", "vllm_v0.10.txt"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := engine.ParseMetrics(engine.DialectVLLM, text); err != nil {
			b.Fatal(err)
		}
	}
}

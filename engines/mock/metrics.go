package mock

import (
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"github.com/switchyard/switchyard/internal/promtext"
)

// Metric names follow vLLM's Prometheus exposition so scrapers written for vLLM work.
const (
	metricRunning          = "vllm:num_requests_running"
	metricWaiting          = "vllm:num_requests_waiting"
	metricKVUsage          = "vllm:kv_cache_usage_perc"
	metricGPUCacheUsage    = "vllm:gpu_cache_usage_perc"
	metricPromptTokens     = "vllm:prompt_tokens_total" //nolint:gosec // a metric name, not a credential
	metricGenerationTokens = "vllm:generation_tokens_total"
	metricTTFT             = "vllm:time_to_first_token_seconds"
	metricE2E              = "vllm:e2e_request_latency_seconds"
	metricSuccess          = "vllm:request_success_total"
	metricPrefixQueries    = "vllm:prefix_cache_queries_total"
	metricPrefixHits       = "vllm:prefix_cache_hits_total"
)

// metricsPage is the engine's /metrics exposition: vLLM's names, with a help text each.
var metricsPage = promtext.Page{Prefix: "vllm:", Help: map[string]string{ //nolint:gosec // help texts that mention tokens, not credentials
	"num_requests_running":        "Requests running on the engine (prefill or decode).",
	"num_requests_waiting":        "Requests waiting for a slot on the engine.",
	"kv_cache_usage_perc":         "Fraction of the KV cache in use (1 = full).",
	"gpu_cache_usage_perc":        "Fraction of the KV cache in use (1 = full); the name of older vLLM releases.",
	"prompt_tokens_total":         "Prompt tokens processed.",
	"generation_tokens_total":     "Output tokens generated.",
	"time_to_first_token_seconds": "Time from a request's arrival to its first output token.",
	"e2e_request_latency_seconds": "Time from a request's arrival to its last output token.",
	"request_success_total":       "Requests finished, by reason (stop, length).",
	"prefix_cache_queries_total":  "Prompt tokens looked up in the prefix cache.",
	"prefix_cache_hits_total":     "Prompt tokens found in the prefix cache.",
}}

// Bucket bounds as in vLLM.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	e2eBuckets  = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
)

// modelMetrics are one served model's series (cached pointers; no formatting per request).
type modelMetrics struct {
	promptTokens     *metrics.Counter
	generationTokens *metrics.Counter
	ttft             *metrics.PrometheusHistogram
	e2e              *metrics.PrometheusHistogram
	successLength    *metrics.Counter
	successStop      *metrics.Counter
	prefixQueries    *metrics.Counter
	prefixHits       *metrics.Counter
}

func escapeLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

func newModelMetrics(set *metrics.Set, model string) *modelMetrics {
	l := `{model_name="` + escapeLabel(model) + `"}`
	withReason := func(reason string) string {
		return metricSuccess + `{model_name="` + escapeLabel(model) + `",finished_reason="` + reason + `"}`
	}
	return &modelMetrics{
		promptTokens:     set.GetOrCreateCounter(metricPromptTokens + l),
		generationTokens: set.GetOrCreateCounter(metricGenerationTokens + l),
		ttft:             set.GetOrCreatePrometheusHistogramExt(metricTTFT+l, ttftBuckets),
		e2e:              set.GetOrCreatePrometheusHistogramExt(metricE2E+l, e2eBuckets),
		successLength:    set.GetOrCreateCounter(withReason("length")),
		successStop:      set.GetOrCreateCounter(withReason("stop")),
		prefixQueries:    set.GetOrCreateCounter(metricPrefixQueries + l),
		prefixHits:       set.GetOrCreateCounter(metricPrefixHits + l),
	}
}

// registerEngineGauges adds the engine-wide gauges, labelled with the default model.
func (e *Engine) registerEngineGauges(model string) {
	l := `{model_name="` + escapeLabel(model) + `"}`
	e.metrics.NewGauge(metricRunning+l, func() float64 { r, _ := e.load(); return float64(r) })
	e.metrics.NewGauge(metricWaiting+l, func() float64 { _, w := e.load(); return float64(w) })
	usage := func() float64 {
		st := e.kvStats()
		if st.CapacityTokens == 0 {
			return 0
		}
		return float64(st.UsedTokens) / float64(st.CapacityTokens)
	}
	e.metrics.NewGauge(metricKVUsage+l, usage)
	e.metrics.NewGauge(metricGPUCacheUsage+l, usage)
}

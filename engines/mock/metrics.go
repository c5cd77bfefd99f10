package mock

import (
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"github.com/switchyard/switchyard/internal/promtext"
)

// The name sets of GET /metrics (Config.MetricsNames, --metrics-names).
const (
	// MetricsNamesNative is the engine's own namespace, MetricsPrefix, in base units and
	// Prometheus' naming conventions (promtool-clean).
	MetricsNamesNative = "native"
	// MetricsNamesVLLM is vLLM's names ("vllm:num_requests_running", ...), labelled
	// model_name as vLLM does, for scrapers written for vLLM (the pylon's --engine-metrics
	// vllm). promtool reports their ':' (reserved for recording rules); nothing else.
	MetricsNamesVLLM = "vllm"
)

// MetricsPrefix is the namespace of the native metric names.
const MetricsPrefix = "switchyard_engine_"

// metricNames is one name set: the series the engine writes and the help of each family.
type metricNames struct {
	page promtext.Page
	// model and reason are the label names of the served model and the finish reason.
	model, reason string
	// engineLabel labels the engine-wide gauges (running, waiting, KV): vLLM names the
	// default model there; the native set leaves them unlabelled.
	engineLabel func(defaultModel string) string

	running, waiting string
	kvUsage          []string // the fraction of the KV cache in use, under each name
	kvUsed           string   // KV tokens in use ("": none)
	kvCapacity       string   // KV capacity in tokens ("": none)
	cacheInfo        string   // vLLM's cache_config_info ("": none)

	promptTokens, generationTokens string
	ttft, e2e                      string // histograms
	completed                      string // by reason
	prefixQueries, prefixHits      string
}

var nativeNames = func() *metricNames {
	p := MetricsPrefix
	return &metricNames{
		page: promtext.Page{Prefix: p, Help: map[string]string{ //nolint:gosec // help texts that mention tokens, not credentials
			"requests_running":                  "Requests running on the engine (prefill or decode), over every model.",
			"requests_waiting":                  "Requests waiting for a slot on the engine, over every model.",
			"kv_cache_usage_ratio":              "Fraction of the KV cache the running requests hold (0..1); cached prefixes of finished requests are evictable, so not counted.",
			"kv_cache_used_tokens":              "KV cache tokens the running requests hold (prompt and output each).",
			"kv_cache_capacity_tokens":          "KV cache capacity in tokens, over every worker (0: no cache).",
			"input_tokens_total":                "Prompt tokens of the requests whose prefill ended (cached prefix tokens included).",
			"output_tokens_total":               "Output tokens sent.",
			"time_to_first_token_seconds":       "Time from a request's arrival to its first output token.",
			"request_duration_seconds":          "Time from an admitted request's arrival to its end (its last output token, or the abort).",
			"requests_completed_total":          "Requests that sent all their output tokens, by finish reason (stop, length).",
			"prefix_cache_queried_tokens_total": "Prompt tokens looked up in the prefix cache.",
			"prefix_cache_hit_tokens_total":     "Prompt tokens found in the prefix cache.",
		}},
		model: "model", reason: "reason",
		engineLabel: func(string) string { return "" },
		running:     p + "requests_running", waiting: p + "requests_waiting",
		kvUsage: []string{p + "kv_cache_usage_ratio"}, kvUsed: p + "kv_cache_used_tokens", kvCapacity: p + "kv_cache_capacity_tokens",
		promptTokens: p + "input_tokens_total", generationTokens: p + "output_tokens_total",
		ttft: p + "time_to_first_token_seconds", e2e: p + "request_duration_seconds",
		completed:     p + "requests_completed_total",
		prefixQueries: p + "prefix_cache_queried_tokens_total", prefixHits: p + "prefix_cache_hit_tokens_total",
	}
}()

var vllmNames = func() *metricNames {
	p := "vllm:"
	return &metricNames{
		page: promtext.Page{Prefix: p, Help: map[string]string{ //nolint:gosec // help texts that mention tokens, not credentials
			"num_requests_running":        "Requests running on the engine (prefill or decode).",
			"num_requests_waiting":        "Requests waiting for a slot on the engine.",
			"kv_cache_usage_perc":         "Fraction of the KV cache in use (1 = full).",
			"gpu_cache_usage_perc":        "Fraction of the KV cache in use (1 = full); the name of older vLLM releases.",
			"cache_config_info":           "The KV cache's configuration (always 1): num_gpu_blocks blocks of block_size tokens.",
			"prompt_tokens_total":         "Prompt tokens processed.",
			"generation_tokens_total":     "Output tokens generated.",
			"time_to_first_token_seconds": "Time from a request's arrival to its first output token.",
			"e2e_request_latency_seconds": "Time from a request's arrival to its last output token.",
			"request_success_total":       "Requests finished, by reason (stop, length).",
			"prefix_cache_queries_total":  "Prompt tokens looked up in the prefix cache.",
			"prefix_cache_hits_total":     "Prompt tokens found in the prefix cache.",
		}},
		model: "model_name", reason: "finished_reason",
		engineLabel: func(model string) string { return `{model_name="` + escapeLabel(model) + `"}` },
		running:     p + "num_requests_running", waiting: p + "num_requests_waiting",
		kvUsage:      []string{p + "kv_cache_usage_perc", p + "gpu_cache_usage_perc"},
		cacheInfo:    p + "cache_config_info",
		promptTokens: p + "prompt_tokens_total", generationTokens: p + "generation_tokens_total",
		ttft: p + "time_to_first_token_seconds", e2e: p + "e2e_request_latency_seconds",
		completed:     p + "request_success_total",
		prefixQueries: p + "prefix_cache_queries_total", prefixHits: p + "prefix_cache_hits_total",
	}
}()

func namesOf(set string) *metricNames {
	if set == MetricsNamesVLLM {
		return vllmNames
	}
	return nativeNames
}

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

func newModelMetrics(set *metrics.Set, n *metricNames, model string) *modelMetrics {
	l := `{` + n.model + `="` + escapeLabel(model) + `"}`
	withReason := func(reason string) string {
		return n.completed + `{` + n.model + `="` + escapeLabel(model) + `",` + n.reason + `="` + reason + `"}`
	}
	return &modelMetrics{
		promptTokens:     set.GetOrCreateCounter(n.promptTokens + l),
		generationTokens: set.GetOrCreateCounter(n.generationTokens + l),
		ttft:             set.GetOrCreatePrometheusHistogramExt(n.ttft+l, ttftBuckets),
		e2e:              set.GetOrCreatePrometheusHistogramExt(n.e2e+l, e2eBuckets),
		successLength:    set.GetOrCreateCounter(withReason("length")),
		successStop:      set.GetOrCreateCounter(withReason("stop")),
		prefixQueries:    set.GetOrCreateCounter(n.prefixQueries + l),
		prefixHits:       set.GetOrCreateCounter(n.prefixHits + l),
	}
}

// registerEngineGauges adds the engine-wide gauges (vLLM's names label them with the
// default model).
func (e *Engine) registerEngineGauges(model string) {
	n := e.names
	l := n.engineLabel(model)
	e.metrics.NewGauge(n.running+l, func() float64 { r, _ := e.load(); return float64(r) })
	e.metrics.NewGauge(n.waiting+l, func() float64 { _, w := e.load(); return float64(w) })
	usage := func() float64 {
		st := e.kvStats()
		if st.CapacityTokens == 0 {
			return 0
		}
		return float64(st.UsedTokens) / float64(st.CapacityTokens)
	}
	for _, name := range n.kvUsage {
		e.metrics.NewGauge(name+l, usage)
	}
	if n.kvUsed != "" {
		e.metrics.NewGauge(n.kvUsed+l, func() float64 { return float64(e.kvStats().UsedTokens) })
	}
	capacity := e.kvStats().CapacityTokens // fixed at start
	if n.kvCapacity != "" {
		e.metrics.NewGauge(n.kvCapacity+l, func() float64 { return float64(capacity) })
	}
	if n.cacheInfo != "" && capacity > 0 {
		// vLLM's form: capacity = num_gpu_blocks × block_size; the mock's blocks are tokens.
		info := n.cacheInfo + `{block_size="1",num_gpu_blocks="` + strconv.FormatUint(capacity, 10) + `"}`
		e.metrics.NewGauge(info, func() float64 { return 1 })
	}
}

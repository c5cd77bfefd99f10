package mock_test

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/deploy/deploytest"
	"github.com/switchyard/switchyard/engines/mock"
)

// metricsRun drives an engine serving the metric name set names through a short mixed run
// on virtual time — four streams of 500 prompt tokens on two slots (two run, two wait),
// then a buffered request cut short by max_tokens — and returns the /metrics scrape taken
// while the streams run and the one taken at the end.
func metricsRun(t *testing.T, names string) (mid, end string) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		h := start(t, mock.Config{
			ModelNames: []string{"m"}, NumTokens: 20, TokenDelay: 10 * time.Millisecond, PrefillTokensPerSecond: 10_000,
			MaxConcurrentRequests: 2, KVCacheCapacityTokens: 10_000, MetricsNames: names,
		})
		defer h.stop()
		wait := startStreams(t, h, 4, "500")
		time.Sleep(100 * time.Millisecond) // the first two decode, the others wait
		synctest.Wait()
		mid = string(h.do(call{method: "GET", path: "/metrics"}).Body())
		wait()
		body := `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"short"}]}`
		if r := h.do(call{method: "POST", path: "/v1/chat/completions", body: body}); r.StatusCode() != 200 {
			t.Errorf("buffered request: %d %s", r.StatusCode(), r.Body())
		}
		end = string(h.do(call{method: "GET", path: "/metrics"}).Body())
	})
	return mid, end
}

// The default /metrics passes `promtool check metrics` with nothing to report, during
// and after a run, and every family is in the engine's namespace (or the Go runtime's and
// the process's).
func TestNativeMetricsPassPromtool(t *testing.T) {
	promtool := deploytest.Promtool(t)
	mid, end := metricsRun(t, mock.MetricsNamesNative)
	for name, scrape := range map[string]string{"during the run": mid, "after it": end} {
		if problems := deploytest.CheckMetrics(t, promtool, scrape); len(problems) > 0 {
			t.Errorf("promtool check metrics %s:\n%s", name, strings.Join(problems, "\n"))
		}
		for f := range deploytest.Families(t, scrape) {
			if !strings.HasPrefix(f, mock.MetricsPrefix) && !strings.HasPrefix(f, "go_") && !strings.HasPrefix(f, "process_") {
				t.Errorf("family %s %s is outside %s", f, name, mock.MetricsPrefix)
			}
		}
	}
}

// With --metrics-names=vllm the only reports are the ':' of vLLM's names (reserved for
// recording rules): every family still has its help text and type, counters end in _total.
func TestVLLMMetricsOnlyReportTheColon(t *testing.T) {
	promtool := deploytest.Promtool(t)
	_, end := metricsRun(t, mock.MetricsNamesVLLM)
	colon := regexp.MustCompile(`^vllm:[a-z0-9_]+ metric names should not contain ':'$`)
	problems := deploytest.CheckMetrics(t, promtool, end)
	if len(problems) == 0 {
		t.Error("promtool reports nothing: are the vLLM names served?")
	}
	for _, p := range problems {
		if !colon.MatchString(p) {
			t.Errorf("promtool: %s", p)
		}
	}
}

// series names one sample: family and labels (name=value pairs).
type series struct {
	family string
	labels []string
}

// sample returns the series' value in the scrape (a histogram's sample count), NaN when
// absent.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, s series) float64 {
	t.Helper()
	mf, ok := fams[s.family]
	if !ok {
		return math.NaN()
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) != len(s.labels)/2 {
			continue
		}
		for i := 0; i+1 < len(s.labels); i += 2 {
			if got[s.labels[i]] != s.labels[i+1] {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return math.NaN()
}

func parse(t *testing.T, scrape string) map[string]*dto.MetricFamily {
	t.Helper()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	return fams
}

// The two name sets carry the same figures: the native series and their vLLM twins read
// alike during the run (two running, two waiting, the running requests' KV) and after it.
func TestMetricNameSetsCarryTheSameFigures(t *testing.T) {
	const p = mock.MetricsPrefix
	m := func(labels ...string) []string { return append([]string{"model", "m"}, labels...) }
	v := func(labels ...string) []string { return append([]string{"model_name", "m"}, labels...) }
	twins := []struct {
		native, vllm series
		mid, end     float64 // the value expected in both sets
	}{
		{series{p + "requests_running", nil}, series{"vllm:num_requests_running", v()}, 2, 0},
		{series{p + "requests_waiting", nil}, series{"vllm:num_requests_waiting", v()}, 2, 0},
		// Two running requests hold 500 prompt + 20 output tokens each of 10 000.
		{series{p + "kv_cache_usage_ratio", nil}, series{"vllm:kv_cache_usage_perc", v()}, 0.104, 0},
		{series{p + "kv_cache_usage_ratio", nil}, series{"vllm:gpu_cache_usage_perc", v()}, 0.104, 0},
		{series{p + "kv_cache_capacity_tokens", nil}, series{"vllm:cache_config_info", []string{"block_size", "1", "num_gpu_blocks", "10000"}}, math.NaN(), math.NaN()},
		{series{p + "input_tokens_total", m()}, series{"vllm:prompt_tokens_total", v()}, 1000, 2005},
		{series{p + "output_tokens_total", m()}, series{"vllm:generation_tokens_total", v()}, math.NaN(), 83},
		{series{p + "time_to_first_token_seconds", m()}, series{"vllm:time_to_first_token_seconds", v()}, 2, 5},
		{series{p + "request_duration_seconds", m()}, series{"vllm:e2e_request_latency_seconds", v()}, 0, 5},
		{series{p + "requests_completed_total", m("reason", "stop")}, series{"vllm:request_success_total", v("finished_reason", "stop")}, 0, 4},
		{series{p + "requests_completed_total", m("reason", "length")}, series{"vllm:request_success_total", v("finished_reason", "length")}, 0, 1},
		{series{p + "prefix_cache_queried_tokens_total", m()}, series{"vllm:prefix_cache_queries_total", v()}, 1000, 2005},
		{series{p + "prefix_cache_hit_tokens_total", m()}, series{"vllm:prefix_cache_hits_total", v()}, 0, 0},
	}
	nMid, nEnd := metricsRun(t, mock.MetricsNamesNative)
	vMid, vEnd := metricsRun(t, mock.MetricsNamesVLLM)
	for _, at := range []struct {
		name         string
		native, vllm map[string]*dto.MetricFamily
		wantOf       func(mid, end float64) float64
	}{
		{"during the run", parse(t, nMid), parse(t, vMid), func(mid, _ float64) float64 { return mid }},
		{"after it", parse(t, nEnd), parse(t, vEnd), func(_, end float64) float64 { return end }},
	} {
		for _, tw := range twins {
			n, vl := sample(t, at.native, tw.native), sample(t, at.vllm, tw.vllm)
			if math.IsNaN(n) || math.IsNaN(vl) {
				t.Errorf("%s: %v = %v, %v = %v: a series is missing", at.name, tw.native, n, tw.vllm, vl)
				continue
			}
			if tw.native.family == p+"kv_cache_capacity_tokens" { // vLLM's info series is always 1
				if n != 10_000 || vl != 1 {
					t.Errorf("%s: capacity %v, cache_config_info %v; want 10000 and 1", at.name, n, vl)
				}
				continue
			}
			if n != vl {
				t.Errorf("%s: %v = %v but %v = %v", at.name, tw.native, n, tw.vllm, vl)
			}
			if want := at.wantOf(tw.mid, tw.end); !math.IsNaN(want) && math.Abs(n-want) > 1e-9 {
				t.Errorf("%s: %v = %v, want %v", at.name, tw.native, n, want)
			}
		}
	}
}

// A request that found every concurrency slot taken and waited for one carries
// x-engine-queued: true; one that got a slot at once carries no such header.
func TestQueuedHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, mock.Config{
			ModelNames: []string{"m"}, NumTokens: 5, TokenDelay: 10 * time.Millisecond, PrefillTokensPerSecond: 10_000,
			MaxConcurrentRequests: 1,
		})
		defer h.stop()
		headers := startStreams(t, h, 2, "100")()
		if headers[0] == nil || headers[1] == nil {
			t.Fatal("a stream failed")
		}
		if q0, q1 := string(headers[0].Peek("x-engine-queued")), string(headers[1].Peek("x-engine-queued")); q0 != "" || q1 != "true" {
			t.Errorf("x-engine-queued: first %q, second %q; want none on the first, true on the second", q0, q1)
		}
	})
}

// startStreams starts n streamed chat requests of inputTokens each, admitted by the engine
// in order, and returns a function that waits for them to end and returns their response
// headers (nil for one that failed, reported as a test error).
func startStreams(t *testing.T, h *harness, n int, inputTokens string) func() []*fasthttp.ResponseHeader {
	t.Helper()
	headers := make([]*fasthttp.ResponseHeader, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			hdr, _, err := h.stream(call{method: "POST", path: "/v1/chat/completions", body: chatBody(true, fmt.Sprint("prompt ", i)), headers: hdrs("x-input-tokens", inputTokens)})
			if err != nil {
				t.Error(err)
				return
			}
			headers[i] = hdr
		})
		synctest.Wait() // admitted in order
	}
	return func() []*fasthttp.ResponseHeader {
		wg.Wait()
		return headers
	}
}

package mock_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/latency"
	"github.com/switchyard/switchyard/engines/mock"
)

type ndjsonLine struct {
	at   time.Time
	line map[string]any
}

// The stats stream pings every second with the model and concurrency, and reports a
// request's counters from zero to finished.
func TestStatsStreamAndMetricsReflectARequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := legacyCfg
		cfg.MaxConcurrentRequests = 7
		h := start(t, cfg)
		defer h.stop()

		req := fasthttp.AcquireRequest()
		req.SetRequestURI("http://engine/pylon/v1/stats/stream")
		resp := fasthttp.AcquireResponse()
		resp.StreamBody = true
		if err := h.client.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		lines := make(chan ndjsonLine, 1000)
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(lines)
			sc := bufio.NewScanner(resp.BodyStream())
			for sc.Scan() {
				var m map[string]any
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Errorf("bad NDJSON line %q", sc.Text())
				}
				lines <- ndjsonLine{at: time.Now(), line: m}
			}
		})
		begin := time.Now()
		_, _, err := h.stream(call{
			method: "POST", path: "/v1/chat/completions", body: chatBody(true, "hello"),
			headers: hdrs("x-request-id", "s1", "x-input-tokens", "100"),
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // past the next ping
		synctest.Wait()
		metricsBody := string(h.do(call{method: "GET", path: "/metrics"}).Body())
		h.client.CloseIdleConnections()
		_ = h.eng.Close() // ends the stats stream
		wg.Wait()
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		fasthttp.ReleaseRequest(req)

		var pings []time.Duration
		var stats []string
		for l := range lines {
			switch l.line["type"] {
			case "ping":
				if l.line["model"] != "m" || l.line["max_engine_concurrency"] != 7.0 || l.line["v"] != 1.0 {
					t.Errorf("ping %v", l.line)
				}
				pings = append(pings, l.at.Sub(begin))
			case "stats":
				if l.line["request_id"] != "s1" || l.line["model"] != "m" {
					t.Errorf("stats %v", l.line)
				}
				stats = append(stats, fmt.Sprintf("%v/%v/%v", l.line["tokens_processed"], l.line["tokens_generated"], l.line["finished"]))
			}
		}
		if len(pings) < 2 || pings[0] != 0 || pings[1] != time.Second {
			t.Errorf("pings at %v, want 0s, 1s, …", pings)
		}
		want := "0/0/false 100/0/false 100/1/false 100/2/false 100/3/false 100/4/false 100/5/false 100/5/true"
		if got := strings.Join(stats, " "); got != want {
			t.Errorf("stats events\n got %s\nwant %s", got, want)
		}
		for _, line := range []string{
			`switchyard_engine_input_tokens_total{model="m"} 100`,
			`switchyard_engine_output_tokens_total{model="m"} 5`,
			`switchyard_engine_requests_running 0`,
			`switchyard_engine_requests_waiting 0`,
			`switchyard_engine_time_to_first_token_seconds_count{model="m"} 1`,
			`switchyard_engine_requests_completed_total{model="m",reason="stop"} 1`,
			`switchyard_engine_kv_cache_usage_ratio 0`, // finished: its cached prompt is evictable
			`switchyard_engine_kv_cache_used_tokens 0`,
		} {
			if !strings.Contains(metricsBody, line+"\n") {
				t.Errorf("metrics lack %q", line)
			}
		}
	})
}

// The batched engine over HTTP: 25 concurrent streams decode at ≈163 tok/s each, and a long
// prompt prefills at ≈20 000 tok/s.
func TestBatchedEngineRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := mock.Config{ModelNames: []string{"m"}, EngineModel: mock.ModelBatched, NumTokens: 200}
		h := start(t, cfg)
		defer h.stop()

		var wg sync.WaitGroup
		rates := make([]float64, 25)
		for i := range rates {
			wg.Go(func() {
				_, events, err := h.stream(call{method: "POST", path: "/v1/chat/completions", body: chatBody(true, "x"), headers: hdrs("x-input-tokens", "1")})
				if err != nil {
					t.Error(err)
					return
				}
				times := contentTimes(t, events)
				rates[i] = float64(len(times)-1) / times[len(times)-1].Sub(times[0]).Seconds()
			})
		}
		wg.Wait()
		for i, r := range rates {
			if r < 160 || r > 166 {
				t.Errorf("stream %d decoded at %.1f tok/s, want ≈163", i, r)
			}
		}
		t.Logf("decode rate per sequence at 25 sequences over HTTP: %.2f tok/s", rates[0])

		begin := time.Now()
		hdr, events, err := h.stream(call{method: "POST", path: "/v1/chat/completions", body: chatBody(true, "x"), headers: hdrs("x-input-tokens", "40000")})
		if err != nil {
			t.Fatal(err)
		}
		ttft := contentTimes(t, events)[0].Sub(begin)
		rate := 40000 / ttft.Seconds()
		t.Logf("prefill of 40000 tokens: TTFT %v → %.0f tok/s per worker", ttft, rate)
		// 19 steps of 2048 tokens and one of 1088: 20 × 4 ms + 40000 × 0.05 ms.
		if want := 20*latency.DefaultStepFixed + 40000*latency.DefaultStepPerPrefillToken; ttft != want {
			t.Errorf("TTFT %v, want %v", ttft, want)
		}
		if string(hdr.Peek("x-kv-cache-uncached-input-tokens")) != "40000" {
			t.Errorf("uncached header %q", hdr.Peek("x-kv-cache-uncached-input-tokens"))
		}
	})
}

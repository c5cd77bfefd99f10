package pylon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// standIn answers like a real vLLM or SGLang server: /metrics with a recorded exposition
// (its generation counter optionally growing at genRate tokens/s), /v1/models in the
// engine's shape, and chat completions that check the request as those servers do (a
// served model name, messages, a positive integer max_tokens) with their error bodies.
type standIn struct {
	mu         sync.Mutex
	exposition []byte
	counter    string // the generation counter's value in exposition
	genRate    float64
	genFrom    time.Time
	models     string   // GET /v1/models body
	served     []string // names chat completions accept
	canaryIDs  []string
	frozen     chan struct{} // while set, every request waits for it to close (a frozen engine)
	streams    bool          // chat completions may ask for a stream: 20 events 100 ms apart
}

// stream answers a streamed chat completion: an event every 100 ms, 20 in all, each
// waiting while the stand-in is frozen.
func (s *standIn) stream(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/event-stream")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		for i := range 20 {
			if i > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			s.mu.Lock()
			frozen := s.frozen
			s.mu.Unlock()
			if frozen != nil {
				<-frozen
			}
			_, _ = w.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"2"}}]}` + "\n\n")
			if w.Flush() != nil {
				return
			}
		}
		_, _ = w.WriteString("data: [DONE]\n\n")
	})
}

func (s *standIn) handle(ctx *fasthttp.RequestCtx) {
	s.mu.Lock()
	if frozen := s.frozen; frozen != nil {
		s.mu.Unlock()
		<-frozen
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	switch string(ctx.Path()) {
	case "/metrics":
		body := s.exposition
		if s.genRate > 0 {
			v := mustFloat(s.counter) + s.genRate*time.Since(s.genFrom).Seconds()
			body = bytes.ReplaceAll(body, []byte(" "+s.counter+"\n"), []byte(" "+strconv.FormatFloat(v, 'e', -1, 64)+"\n"))
		}
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		ctx.SetBody(body)
	case "/v1/models":
		ctx.SetContentType("application/json")
		ctx.SetBodyString(s.models)
	case "/health":
	case "/v1/chat/completions":
		s.chat(ctx)
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
	}
}

func (s *standIn) chat(ctx *fasthttp.RequestCtx) {
	var req struct {
		Model     string            `json:"model"`
		Messages  []json.RawMessage `json:"messages"`
		MaxTokens *int              `json:"max_tokens"`
		Stream    bool              `json:"stream"`
	}
	if id := string(ctx.Request.Header.Peek("X-Request-Id")); strings.HasPrefix(id, "canary-") {
		s.canaryIDs = append(s.canaryIDs, id)
	}
	ctx.SetContentType("application/json")
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || len(req.Messages) == 0 || req.MaxTokens == nil || *req.MaxTokens < 1 || (req.Stream && !s.streams) {
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetBodyString(`{"object":"error","message":"invalid request","type":"BadRequestError","param":null,"code":400}`)
		return
	}
	if !slices.Contains(s.served, req.Model) {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString(`{"object":"error","message":"The model ` + "`" + req.Model + "`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`)
		return
	}
	if req.Stream {
		s.stream(ctx)
		return
	}
	n := min(*req.MaxTokens, 2) // "2", then the end of the answer
	ctx.SetBodyString(`{"id":"chatcmpl-1","object":"chat.completion","model":` + strconv.Quote(req.Model) +
		`,"choices":[{"index":0,"message":{"role":"assistant","content":"2"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":13,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(13+n) + `}}`)
}

func mustFloat(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(err)
	}
	return v
}

// vLLM lists every --served-model-name with the model path as root; SGLang its one name.
func vllmModels(root string, names ...string) string {
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[`)
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%q,"object":"model","created":1754116808,"owned_by":"vllm","root":%q,"parent":null,"max_model_len":8192,"permission":[]}`, n, root)
	}
	b.WriteString(`]}`)
	return b.String()
}

const qwen = "Qwen/Qwen2.5-7B-Instruct"

// sglangQwen is SGLang's GET /v1/models serving qwen.
var sglangQwen = fmt.Sprintf(`{"object":"list","data":[{"id":%q,"object":"model","created":1754116808,"owned_by":"sglang","root":%q,"max_model_len":32768}]}`, qwen, qwen)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("engine", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newStandInHermetic is newHermetic with the stand-in as the engine.
func newStandInHermetic(t *testing.T, cfg pylon.Config, s *standIn) *hermetic {
	t.Helper()
	h := &hermetic{t: t, lns: map[string]*fasthttputil.InmemoryListener{}, regs: make(chan received, 1024)}
	for _, host := range []string{"engine", "gateway", "pylon", "pylon-admin"} {
		h.lns[host] = fasthttputil.NewInmemoryListener()
	}
	eng := &fasthttp.Server{Handler: s.handle}
	ctl := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		r := received{at: time.Now(), method: string(ctx.Method())}
		if r.method == "PUT" {
			reg, err := wire.DefaultLimits().ParseRegistration(strings.TrimPrefix(string(ctx.Path()), wire.RegistrationPath), ctx.PostBody())
			if err != nil {
				ctx.Error(err.Error(), 400)
				return
			}
			r.reg = reg
		}
		h.regs <- r
		body, _ := json.Marshal(wire.RegistrationAck{GatewayID: "gw-test", HeartbeatMs: 1000})
		ctx.SetBody(body)
	}}
	h.servers = append(h.servers, eng, ctl)
	h.wg.Go(func() { _ = eng.Serve(h.lns["engine"]) })
	h.wg.Go(func() { _ = ctl.Serve(h.lns["gateway"]) })
	cfg.UpstreamBaseURL, cfg.Gateways, cfg.AdvertiseURL = "http://engine", []string{"http://gateway"}, "http://pylon:8100"
	h.logs = &logRecorder{}
	p, err := pylon.New(cfg, pylon.Deps{Listener: h.lns["pylon"], AdminListener: h.lns["pylon-admin"], Dial: h.dial, Logger: slog.New(h.logs)})
	if err != nil {
		t.Fatal(err)
	}
	h.pylon = p
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.pylonDone = make(chan struct{})
	go func() {
		defer close(h.pylonDone)
		h.runErr = p.Run(ctx)
	}()
	h.client = &fasthttp.HostClient{Addr: "pylon", Dial: h.dial}
	h.admin = &fasthttp.HostClient{Addr: "pylon-admin", Dial: h.dial}
	return h
}

// row is what a registration carried for the table.
type row struct {
	Running, Queue, KVCapacity, KVUsed uint64
	OutputTPS                          float64
}

func rowOf(s wire.Stats) row {
	return row{s.NumRunningQueries, s.QueueSize, s.KVCacheCapacityTokens, s.KVCacheUsedTokens, s.OutputTPS}
}

func realEngineConfig(dialect, model string) pylon.Config {
	cfg := pylon.DefaultConfig()
	cfg.ModelNames, cfg.EngineStatsStream, cfg.EngineMetrics = []string{model}, "off", dialect
	cfg.CanaryInterval = 0
	return cfg
}

// The table, re-run: a pylon with --engine-metrics in front of a stand-in that
// answers /metrics with real vLLM and SGLang expositions (3 running, 2 waiting, 2 340 × 16
// tokens of KV cache at 25 %, counters in the millions) registers the engine's counts and
// KV figures, and an output rate of 0 for ten seconds without traffic: the first scrape
// after the pylon starts only sets the counters' baseline.
func TestRealEngineRegistrations(t *testing.T) {
	want := row{Running: 3, Queue: 2, KVCapacity: 37440, KVUsed: 9360}
	for _, tt := range []struct {
		file, dialect, model, models string
	}{
		{"vllm_v0.10.txt", "vllm", "meta-llama/Llama-3.1-8B-Instruct", vllmModels("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct")},
		{"vllm_v0.6_multiproc.txt", "vllm", "meta-llama/Llama-3.1-8B-Instruct", vllmModels("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct")},
		{"vllm_v0.10_dp2.txt", "vllm", "meta-llama/Llama-3.1-8B-Instruct", vllmModels("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct")},
		{"sglang_v0.4.txt", "sglang", "Qwen/Qwen2.5-7B-Instruct", sglangQwen},
		{"sglang_v0.5.txt", "sglang", "Qwen/Qwen2.5-7B-Instruct", sglangQwen},
		{"sglang_v0.5_dp2.txt", "sglang", "Qwen/Qwen2.5-7B-Instruct", sglangQwen},
	} {
		t.Run(tt.file, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &standIn{exposition: fixture(t, tt.file), models: tt.models, served: []string{tt.model}}
				h := newStandInHermetic(t, realEngineConfig(tt.dialect, tt.model), s)
				first := h.await(3*time.Second, func(r received) bool {
					st, ok := modelStats(r, tt.model)
					return ok && st.KVCacheCapacityTokens > 0
				})
				got, _ := modelStats(first, tt.model)
				t.Logf("%s %s: running %d, queue %d, kv capacity %d, kv used %d, output_tps %v",
					tt.dialect, tt.file, got.NumRunningQueries, got.QueueSize, got.KVCacheCapacityTokens, got.KVCacheUsedTokens, got.OutputTPS)
				end := time.After(10 * time.Second)
				for n := 1; ; n++ {
					if r := rowOf(got); r != want {
						t.Errorf("registration %d carried %+v, want %+v", n, r, want)
					}
					select {
					case r := <-h.regs:
						got, _ = modelStats(r, tt.model)
						continue
					case <-end:
					}
					break
				}
				h.close()
			})
		})
	}
}

// A pylon restart against an engine whose counters are large publishes no phantom rate,
// while real generation (250 tokens/s on the engine's counter) is published as such.
func TestRealEngineRestartPublishesNoPhantomRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const model = "meta-llama/Llama-3.1-8B-Instruct"
		s := &standIn{exposition: fixture(t, "vllm_v0.10.txt"), counter: "6.531002e+06", models: vllmModels(model, model), served: []string{model}}
		maxOutput := func(h *hermetic, d time.Duration) float64 {
			end := time.After(d)
			var peak float64
			for {
				select {
				case r := <-h.regs:
					if st, ok := modelStats(r, model); ok {
						peak = max(peak, st.OutputTPS)
					}
				case <-end:
					return peak
				}
			}
		}
		for restart := range 2 {
			h := newStandInHermetic(t, realEngineConfig("vllm", model), s)
			if peak := maxOutput(h, 5*time.Second); peak != 0 {
				t.Errorf("start %d: output_tps reached %v without traffic", restart+1, peak)
			}
			h.close()
		}
		s.mu.Lock()
		s.genRate, s.genFrom = 250, time.Now()
		s.mu.Unlock()
		h := newStandInHermetic(t, realEngineConfig("vllm", model), s)
		if peak := maxOutput(h, 5*time.Second); peak < 249 || peak > 251 {
			t.Errorf("with 250 tokens/s on the engine's counter the output_tps peaked at %v", peak)
		}
		h.close()
	})
}

// vLLM serving one model under several names (--served-model-name llama llama-8b) labels
// its metrics with the first: a pylon serving the second name gets them, with no warning.
// A pylon whose --model-name the engine does not serve is told so at start (log and
// pylon_engine_model_served 0), and still gets the only model's figures (logged).
func TestRealEngineServedModelNames(t *testing.T) {
	exposition := func(t *testing.T) []byte {
		t.Helper()
		return bytes.ReplaceAll(fixture(t, "vllm_v0.10.txt"), []byte(`model_name="meta-llama/Llama-3.1-8B-Instruct"`), []byte(`model_name="llama"`))
	}
	for _, tt := range []struct {
		name, model, served, match string
		warn                       []string
	}{
		{"alias", "llama-8b", "1", "alias", nil},
		{"not served", "wrong-name", "0", "only", []string{"engine_model_not_served", "engine_metrics_under_another_model_name"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &standIn{exposition: exposition(t), models: vllmModels("/models/llama-3.1-8b", "llama", "llama-8b"), served: []string{"llama", "llama-8b"}}
				h := newStandInHermetic(t, realEngineConfig("vllm", tt.model), s)
				r := h.await(3*time.Second, func(r received) bool {
					st, ok := modelStats(r, tt.model)
					return ok && st.NumRunningQueries == 3 && st.KVCacheCapacityTokens == 37440
				})
				if st, _ := modelStats(r, tt.model); st.QueueSize != 2 {
					t.Errorf("queue %d, want 2", st.QueueSize)
				}
				time.Sleep(time.Second)
				m := adminGet(t, h, "/metrics")
				if want := `pylon_engine_model_served{model="` + tt.model + `"} ` + tt.served; !strings.Contains(m, want) {
					t.Errorf("metrics lack %s", want)
				}
				if want := `pylon_engine_metrics_model_matched{model="` + tt.model + `"} 1`; !strings.Contains(m, want) {
					t.Errorf("metrics lack %s", want)
				}
				var d struct {
					Models map[string]struct {
						Served  *bool `json:"served"`
						Metrics struct {
							EngineModel string `json:"engine_model"`
							Match       string `json:"match"`
						} `json:"metrics"`
					} `json:"models"`
					ServedModels []string `json:"served_models"`
				}
				if err := json.Unmarshal([]byte(adminGet(t, h, "/debug/engine")), &d); err != nil {
					t.Fatal(err)
				}
				md := d.Models[tt.model]
				if md.Metrics.EngineModel != "llama" || md.Metrics.Match != tt.match || md.Served == nil || (*md.Served) != (tt.served == "1") ||
					!slices.Equal(d.ServedModels, []string{"llama", "llama-8b"}) {
					t.Errorf("/debug/engine: %+v", d)
				}
				for _, w := range []string{"engine_model_not_served", "engine_metrics_under_another_model_name", "engine_metrics_model_unmatched"} {
					if got := len(h.logs.matching(w)); got != 0 != slices.Contains(tt.warn, w) || got > 1 {
						t.Errorf("log %s %d times, want it %v once", w, got, slices.Contains(tt.warn, w))
					}
				}
				h.close()
			})
		})
	}
}

// With --cluster-id shared by several backends fronting one engine, gateways sum queue
// sizes over the backends: the engine's waiting count stays out of this backend's queue,
// its running count (cluster-scoped, not summed) is published.
func TestRealEngineSharedClusterDoesNotDoubleCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const model = "Qwen/Qwen2.5-7B-Instruct"
		s := &standIn{exposition: fixture(t, "sglang_v0.5.txt"), models: sglangQwen, served: []string{model}}
		cfg := realEngineConfig("sglang", model)
		cfg.ID, cfg.ClusterID = "pylon-a", "engine-1"
		h := newStandInHermetic(t, cfg, s)
		r := h.await(3*time.Second, func(r received) bool {
			st, ok := modelStats(r, model)
			return ok && st.KVCacheCapacityTokens > 0
		})
		if st, _ := modelStats(r, model); st.NumRunningQueries != 3 || st.QueueSize != 0 || st.QueuedInputSize != 0 || st.KVCacheUsedTokens != 9360 {
			t.Errorf("shared engine: %+v, want running 3 and an empty queue of this backend's own", st)
		}
		h.close()
	})
}

// The canary sends what real engines accept (a chat completion with the served name,
// max_tokens and a unique x-request-id); a model the engine does not serve fails it with
// reason model_not_found, shown in /debug/engine (with the engine's message and names),
// in pylon_canary_failures_total and once in the log.
func TestRealEngineCanary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const model = "meta-llama/Llama-3.1-8B-Instruct"
		s := &standIn{exposition: fixture(t, "vllm_v0.10.txt"), models: vllmModels(model, model), served: []string{model}}
		cfg := realEngineConfig("vllm", model)
		cfg.CanaryInterval, cfg.CanaryTimeout = time.Second, 500*time.Millisecond
		h := newStandInHermetic(t, cfg, s)
		h.await(3*time.Second, func(r received) bool { return r.reg.Models[model].Status == wire.StatusActive })
		time.Sleep(3 * time.Second)
		s.mu.Lock()
		ids := slices.Clone(s.canaryIDs)
		s.served = []string{"llama"} // the engine restarted with another --served-model-name
		s.mu.Unlock()
		if len(ids) < 2 || ids[0] != "canary-pylon-1" || ids[1] != "canary-pylon-2" {
			t.Errorf("canary request ids %v", ids)
		}
		h.await(3*time.Second, func(r received) bool { return r.reg.Models[model].Status == wire.StatusInactive })
		time.Sleep(2 * time.Second)
		var d struct {
			Models map[string]struct {
				Canary struct {
					Result, Reason, Detail string
					Failures               int `json:"consecutive_failures"`
				} `json:"canary"`
			} `json:"models"`
		}
		if err := json.Unmarshal([]byte(adminGet(t, h, "/debug/engine")), &d); err != nil {
			t.Fatal(err)
		}
		c := d.Models[model].Canary
		if c.Result != "failed" || c.Reason != "model_not_found" || c.Failures < 2 ||
			!strings.Contains(c.Detail, "status 404: The model `"+model+"` does not exist.") {
			t.Errorf("/debug/engine canary: %+v", c)
		}
		m := adminGet(t, h, "/metrics")
		if !strings.Contains(m, `pylon_canary_failures_total{model="`+model+`",reason="model_not_found"}`) {
			t.Errorf("metrics lack the canary failure reason")
		}
		if got := h.logs.matching("canary_failed"); len(got) != 1 || !strings.Contains(got[0], "reason=model_not_found") {
			t.Errorf("canary_failed logged %q, want once with the reason", got)
		}
		s.mu.Lock()
		s.served = []string{model}
		s.mu.Unlock()
		h.await(3*time.Second, func(r received) bool { return r.reg.Models[model].Status == wire.StatusActive })
		if got := h.logs.matching("canary_passed"); len(got) != 1 {
			t.Errorf("canary_passed logged %q, want once", got)
		}
		h.close()

		// A threshold of 1 (max_tokens 1) checks liveness only: one generated token is
		// no runaway. With threshold 2 the same answer is one.
		for threshold, want := range map[int]string{1: wire.StatusActive, 2: wire.StatusInactive} {
			cfg.CanaryThreshold = threshold
			h := newStandInHermetic(t, cfg, s)
			h.await(3*time.Second, func(r received) bool { return r.reg.Models[model].Status == want })
			time.Sleep(3 * time.Second)
			for len(h.regs) > 0 {
				if r := <-h.regs; r.reg.Models[model].Status != want {
					t.Errorf("threshold %d: %s, want %s throughout", threshold, r.reg.Models[model].Status, want)
				}
			}
			h.close()
		}
	})
}

func adminGet(t *testing.T, h *hermetic, path string) string {
	t.Helper()
	status, body, err := h.admin.Get(nil, "http://pylon-admin"+path)
	if err != nil || status != 200 {
		t.Fatalf("GET %s: %v %d", path, err, status)
	}
	return string(body)
}

// The mock engine told to serve vLLM's names (--metrics-names=vllm) stands in for vLLM: a
// pylon that reads it only through --engine-metrics=vllm registers the requests another
// client runs and queues on the engine, and the engine's KV capacity and use. With the
// engine's default names the same pylon registers none of them.
func TestMockEngineWithVLLMNames(t *testing.T) {
	const model = "dummy-model"
	for _, names := range []string{mock.MetricsNamesVLLM, mock.MetricsNamesNative} {
		t.Run(names, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHermetic(t, realEngineConfig("vllm", model), mock.Config{
					MetricsNames: names, MaxConcurrentRequests: 1, KVCacheCapacityTokens: 10_000,
					NumTokens: 20, TokenDelay: 100 * time.Millisecond,
				})
				eng := &fasthttp.HostClient{Addr: "engine", Dial: h.dial}
				var wg sync.WaitGroup
				for i := range 3 { // straight to the engine, past the pylon: one runs, two wait
					wg.Go(func() {
						req := fasthttp.AcquireRequest()
						defer fasthttp.ReleaseRequest(req)
						req.SetRequestURI("http://engine/v1/chat/completions")
						req.Header.SetMethod("POST")
						req.Header.Set("x-input-tokens", "1000")
						req.SetBodyString(`{"model":"dummy-model","messages":[{"role":"user","content":"other client ` + strconv.Itoa(i) + `"}]}`)
						resp := fasthttp.AcquireResponse()
						defer fasthttp.ReleaseResponse(resp)
						if err := eng.Do(req, resp); err != nil || resp.StatusCode() != 200 {
							t.Errorf("request %d to the engine: %v %d", i, err, resp.StatusCode())
						}
					})
				}
				if names == mock.MetricsNamesVLLM {
					r := h.await(3*time.Second, func(r received) bool {
						st, ok := modelStats(r, model)
						return ok && st.NumRunningQueries == 1 && st.QueueSize == 2
					})
					// The running request holds its 1 000 prompt and 20 output tokens.
					if st, _ := modelStats(r, model); st.KVCacheCapacityTokens != 10_000 || st.KVCacheUsedTokens != 1020 {
						t.Errorf("KV capacity %d, used %d; want 10000 and 1020", st.KVCacheCapacityTokens, st.KVCacheUsedTokens)
					}
				} else {
					time.Sleep(3 * time.Second) // three scrapes, three heartbeats
					synctest.Wait()
					seen := 0
					for len(h.regs) > 0 {
						if st, ok := modelStats(<-h.regs, model); ok {
							seen++
							if st.NumRunningQueries != 0 || st.QueueSize != 0 || st.KVCacheCapacityTokens != 0 {
								t.Errorf("registered running %d, queue %d, KV capacity %d from names the pylon does not read", st.NumRunningQueries, st.QueueSize, st.KVCacheCapacityTokens)
							}
						}
					}
					if seen < 2 {
						t.Errorf("%d registrations in 3 s", seen)
					}
				}
				wg.Wait()
				eng.CloseIdleConnections()
				h.close()
			})
		})
	}
}

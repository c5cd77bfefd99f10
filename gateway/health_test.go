package gateway_test

import (
	"bufio"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// scrapeMetric returns the value of one series on /metrics ("" when absent).
func (h *harness) scrapeMetric(series string) string {
	h.t.Helper()
	for line := range strings.SplitSeq(h.do("GET", "/metrics", nil, nil).body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// healthState is the part of /debug/state the passive health tests read.
type healthState struct {
	Backends []struct {
		ID     string `json:"id"`
		Health struct {
			Ejected             bool      `json:"ejected"`
			Until               time.Time `json:"until"`
			Reason              string    `json:"reason"`
			ConsecutiveFailures int       `json:"consecutive_failures"`
			Level               int       `json:"level"`
			Ejections           int       `json:"ejections_total"`
		} `json:"health"`
	} `json:"backends"`
	Targets []struct {
		Model   string   `json:"model"`
		Ejected []string `json:"ejected"`
	} `json:"targets"`
}

func (h *harness) healthState() healthState {
	h.t.Helper()
	var st healthState
	if err := json.Unmarshal([]byte(h.do("GET", "/debug/state", nil, nil).body), &st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

var streamBody = []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`)

// engineDown answers like a pylon whose engine cannot be reached (pylon/problem.go).
func engineDown(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	ctx.SetContentType("application/problem+json")
	ctx.Response.Header.Set(wire.HeaderRetryable, "true")
	ctx.Response.Header.Set(wire.HeaderRetryReason, wire.RetryLocalConnectFailure)
	ctx.SetBodyString(`{"type":"about:blank","status":503,"reason":"local_connect_failure","detail":"the inference engine is unreachable"}`)
}

// A pylon whose engine is down answers retryable 503s: every request is served by the
// other backend (0 failures), the failing backend is ejected after three of them (no
// request tries it while ejected), /debug/state and the metrics show it, and once its
// engine is back and the ejection over, one successful request resets its state.
func TestEngineDownIsRetriedAndEjected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		var down atomic.Bool
		down.Store(true)
		h.register(h.pylon("down", "c-down", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			if down.Load() {
				engineDown(ctx)
				return
			}
			ctx.SetBodyString(`{"served_by":"down"}`)
		}))
		h.register(h.pylon("up", "c-up", idleLoad(), nil))
		for i := range 20 {
			r := h.chat(nil)
			if r.status != 200 || r.headers["X-Inference-Server-Id"] != "up" {
				t.Fatalf("request %d: %d from %q: %s", i, r.status, r.headers["X-Inference-Server-Id"], r.body)
			}
		}
		tries := h.scrapeMetric(`switchyard_proxy_retries_total{routing_key="",model="m",reason="engine_unreachable"}`)
		if tries != "3" {
			t.Errorf("retries after engine_unreachable: %q, want 3 (then the backend is ejected)", tries)
		}
		st := h.healthState()
		var found bool
		for _, b := range st.Backends {
			if b.ID != "down" {
				continue
			}
			found = true
			hs := b.Health
			if !hs.Ejected || hs.Reason != "engine_unreachable" || hs.ConsecutiveFailures != 3 || hs.Level != 1 || hs.Until.IsZero() {
				t.Errorf("down's health: %+v", hs)
			}
		}
		if !found || len(st.Targets) != 1 || len(st.Targets[0].Ejected) != 1 || st.Targets[0].Ejected[0] != "down" {
			t.Errorf("debug state: %+v", st)
		}
		for series, want := range map[string]string{
			`switchyard_backend_ejections_total{reason="engine_unreachable"}`: "1",
			`switchyard_backend_ejections_total{reason="connect_failure"}`:    "0",
			`switchyard_backends_ejected`:                                     "1",
		} {
			if got := h.scrapeMetric(series); got != want {
				t.Errorf("%s = %q, want %q", series, got, want)
			}
		}
		// The engine comes back; after the 1 s ejection the backend takes requests again,
		// and its first success clears its record.
		down.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		served := map[string]int{}
		for range 4 {
			r := h.chat(nil)
			if r.status != 200 {
				t.Fatalf("after recovery: %d %s", r.status, r.body)
			}
			served[r.headers["X-Inference-Server-Id"]]++
		}
		if served["down"] != 2 {
			t.Errorf("after recovery: %v, want 2 of 4 on the recovered backend", served)
		}
		for _, b := range h.healthState().Backends {
			if b.ID == "down" && (b.Health.Ejected || b.Health.ConsecutiveFailures != 0 || b.Health.Level != 0 || b.Health.Ejections != 1) {
				t.Errorf("after recovery: %+v", b.Health)
			}
		}
		if got := h.scrapeMetric(`switchyard_backends_ejected`); got != "0" {
			t.Errorf("ejected gauge after recovery: %q", got)
		}
	})
}

// A frozen pylon (it accepts connections and requests but never answers): each streamed
// request is answered by the other backend within the first-byte deadline (the 2 s floor
// here: the TTFT estimate of an idle backend is a few ms, ×4), and after three timeouts the
// frozen backend is ejected, so later requests do not wait for it at all.
func TestFrozenPylonFirstByteDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		release := make(chan struct{})
		var frozenCalls atomic.Int32
		h.register(h.pylon("frozen", "c-frozen", idleLoad(), func(int, *fasthttp.RequestCtx) {
			frozenCalls.Add(1)
			<-release
		}))
		h.register(h.pylon("ok", "c-ok", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString("data: {}\n\ndata: [DONE]\n\n")
		}))
		const floor = 2 * time.Second
		const period = floor / 8 // the watchdog's tick
		var slow int
		for i := range 12 {
			start := time.Now()
			r := h.do("POST", "/v1/chat/completions", streamBody, nil)
			took := time.Since(start)
			if r.status != 200 || r.headers["X-Inference-Server-Id"] != "ok" {
				t.Fatalf("request %d: %d from %q after %v: %s", i, r.status, r.headers["X-Inference-Server-Id"], took, r.body)
			}
			if took > floor+2*period {
				t.Errorf("request %d answered after %v, want within the first-byte deadline %v (+2 ticks)", i, took, floor)
			}
			if took >= floor {
				slow++
			}
		}
		if slow != 3 || frozenCalls.Load() != 3 {
			t.Errorf("%d requests waited for the frozen pylon (%d reached it), want 3: then it is ejected", slow, frozenCalls.Load())
		}
		if got := h.scrapeMetric(`switchyard_proxy_retries_total{routing_key="",model="m",reason="first_byte_timeout"}`); got != "3" {
			t.Errorf("first_byte_timeout retries: %q, want 3", got)
		}
		if got := h.scrapeMetric(`switchyard_backend_ejections_total{reason="first_byte_timeout"}`); got != "1" {
			t.Errorf("first_byte_timeout ejections: %q, want 1", got)
		}
		close(release)
	})
}

// The first-byte deadline follows the backend's own TTFT estimate: a backend with 10 s of
// queued work (at 1000 tokens/s) gets 4 × its estimate, capped by the headers timeout; a
// frozen one behind that deadline is abandoned once it passes and the request retried.
func TestFirstByteDeadlineFollowsTheTTFTEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{HeadersTimeout: 20 * time.Second, MaxConnectRetries: -1}, `{"default":"round-robin"}`)
		busy := idleLoad()
		busy.MaxEngineConcurrency, busy.QueuedInputTokens = 0, 3000 // 3 s of queue
		release := make(chan struct{})
		h.register(h.pylon("busy", "c-busy", busy, func(int, *fasthttp.RequestCtx) { <-release }))
		start := time.Now()
		r := h.do("POST", "/v1/chat/completions", streamBody, map[string]string{"x-input-tokens": "1000"})
		took := time.Since(start)
		// TTFT ≈ 3 s queue + 1 s prefill = 4 s: deadline 16 s (within the 20 s cap).
		if r.status != 502 || took < 16*time.Second || took > 16*time.Second+2*(2*time.Second/8) {
			t.Errorf("busy frozen pylon: %d after %v (%s), want 502 after about 16 s", r.status, took, r.body)
		}
		if !strings.Contains(r.body, "first-byte deadline") {
			t.Errorf("error %s does not name the first-byte deadline", r.body)
		}
		close(release)
	})
}

// A restarted backend reports no input throughput yet (0): it is estimated at the median
// of its target's other backends instead of as never finishing a prefill, so power-of-n
// (ttft comparator) gives it its share of serial requests at once.
func TestRestartedBackendWithoutThroughputGetsTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		h.register(h.pylon("steady", "c-steady", load.Load{InputTPS: 1000}, nil))
		h.register(h.pylon("restarted", "c-restarted", load.Load{}, nil)) // tps 0 in every report
		served := map[string]int{}
		for range 60 {
			r := h.do("POST", "/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`), map[string]string{"x-input-tokens": "500"})
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			served[r.headers["X-Inference-Server-Id"]]++
		}
		if served["restarted"] < 15 {
			t.Errorf("served %v: the restarted backend got %d of 60", served, served["restarted"])
		}
	})
}

// A pylon that cannot be reached at all (its process is gone: connections refused) is
// ejected after three connect failures; requests meanwhile fail over to the other one.
func TestConnectFailuresEject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		gone := h.pylon("gone", "c-gone", idleLoad(), nil)
		goneServer := h.servers[len(h.servers)-1]
		h.register(gone)
		h.register(h.pylon("up", "c-up", idleLoad(), nil))
		h.mu.Lock()
		delete(h.lns, gone.addr) // new connections fail
		h.mu.Unlock()
		_ = goneServer.Shutdown() // and the open ones close
		for i := range 12 {
			if r := h.chat(nil); r.status != 200 || r.headers["X-Inference-Server-Id"] != "up" {
				t.Fatalf("request %d: %d from %q: %s", i, r.status, r.headers["X-Inference-Server-Id"], r.body)
			}
		}
		if got := h.scrapeMetric(`switchyard_backend_ejections_total{reason="connect_failure"}`); got != "1" {
			t.Errorf("connect_failure ejections: %q, want 1", got)
		}
		if got := h.scrapeMetric(`switchyard_proxy_retries_total{routing_key="",model="m",reason="connect_failover"}`); got != "3" {
			t.Errorf("connect failovers: %q, want 3", got)
		}
	})
}

// Bursts of 40 concurrent requests on an idle two-backend fleet of real pylons and engines
// (in process, virtual time): none fails, and none is even refused by a pylon's local
// admission (without the dispatch order the pylons refuse a few: their requests arrive
// in another order than the gateway granted them). TestLoopbackE2EBurstOnIdleFleet is the
// same with real processes, where the reordering is much stronger.
func TestFullStackBurstOnIdleFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFullStack(t, "")
		for _, id := range []string{"b1", "b2"} {
			f.backend(t, id, mock.Config{NumTokens: 4, TokenDelay: 5 * time.Millisecond, PrefillTokensPerSecond: 20_000}, 20_000)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		body := []byte(`{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"x"}]}`)
		statuses := map[int]int{}
		var mu sync.Mutex
		for range 5 {
			var wg sync.WaitGroup
			for range 40 {
				wg.Go(func() {
					r := f.h.do("POST", "/v1/chat/completions", body, map[string]string{"x-input-tokens": "400"})
					mu.Lock()
					statuses[r.status]++
					mu.Unlock()
				})
			}
			wg.Wait()
			time.Sleep(300 * time.Millisecond)
		}
		if statuses[200] != 200 {
			t.Errorf("statuses %v, want 200 × 200", statuses)
		}
		// The pylons judge each dispatch against the queue its gateway could know about:
		// the arrival order of a burst's requests causes no mismatch.
		if got := f.h.scrapeMetric(`switchyard_proxy_retries_total{routing_key="",model="dummy-model",reason="queue_estimate_mismatch"}`); got != "" && got != "0" {
			t.Errorf("queue_estimate_mismatch retries: %s, want none", got)
		}
	})
}

// killEngine stops backend id's engine the way kill -9 does: its address refuses new
// connections and its open connections close.
func (f *fullStack) killEngine(t *testing.T, id string, eng *mock.Engine) {
	t.Helper()
	f.h.mu.Lock()
	ln := f.h.lns["e"+id+":80"]
	delete(f.h.lns, "e"+id+":80")
	f.h.mu.Unlock()
	_ = ln.Close()
	_ = eng.Close()
}

// Through real pylons: the engine behind one pylon dies. The pylon answers that its
// engine is unreachable (retryable), the gateway retries every such request on the other
// backend and ejects the failing one: no request fails.
func TestFullStackEngineDownNoFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFullStack(t, `{"default":"round-robin"}`)
		cfg := mock.Config{NumTokens: 3, TokenDelay: time.Millisecond, PrefillTokensPerSecond: 100_000}
		f.backend(t, "a", cfg, 100_000)
		f.backend(t, "b", cfg, 100_000)
		time.Sleep(time.Second)
		synctest.Wait()
		plain := []byte(`{"model":"dummy-model","messages":[{"role":"user","content":"x"}]}`)
		stream := []byte(`{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"x"}]}`)
		for range 4 { // warm both pylons' engine connections
			if r := f.h.do("POST", "/v1/chat/completions", plain, nil); r.status != 200 {
				t.Fatalf("before the kill: %d %s", r.status, r.body)
			}
		}
		f.killEngine(t, "a", f.engines[0])
		served := map[string]int{}
		for i := range 60 {
			body := plain
			if i%2 == 1 {
				body = stream
			}
			r := f.h.do("POST", "/v1/chat/completions", body, nil)
			if r.status != 200 {
				t.Fatalf("request %d after the engine died: %d %s", i, r.status, r.body)
			}
			served[r.headers["X-Inference-Server-Id"]]++
			time.Sleep(50 * time.Millisecond)
		}
		if served["b"] != 60 {
			t.Errorf("served %v, want all 60 by b", served)
		}
		retries := f.h.scrapeMetric(`switchyard_proxy_retries_total{routing_key="",model="dummy-model",reason="engine_unreachable"}`)
		ejections := f.h.scrapeMetric(`switchyard_backend_ejections_total{reason="engine_unreachable"}`)
		probeEjections := f.h.scrapeMetric(`switchyard_backend_ejections_total{reason="health_probe_failed"}`)
		t.Logf("engine_unreachable retries %s, ejections: engine_unreachable %s, health_probe_failed %s", retries, ejections, probeEjections)
		if retries == "" || retries == "0" || (ejections == "0" && probeEjections == "0") {
			t.Errorf("the dead engine's backend was neither retried away from nor ejected")
		}
	})
}

// A pylon that stops answering altogether (frozen: not even /health) while it still counts
// as registered has the requests it holds abandoned after two health probes in a row got
// no answer: each fails over to the other backend (a pylon_unresponsive retry) about 5 s
// after the freeze, not after the 30 s headers timeout a buffered answer would wait.
func TestUnresponsivePylonRequestsFailOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		frozen := h.pylon("frozen", "c-frozen", idleLoad(), nil)
		h.register(frozen)
		h.register(h.pylon("ok", "c-ok", idleLoad(), nil))
		thaw := frozen.freeze()
		results, took := h.concurrently(4, func() response { return h.chat(nil) })
		waited := 0
		for i, r := range results {
			if r.status != 200 || !strings.Contains(r.body, `"served_by":"ok"`) {
				t.Errorf("request %d: %d after %v: %s", i, r.status, took[i], r.body)
			}
			if took[i] > 6*time.Second {
				t.Errorf("request %d answered after %v, want within 6 s of the freeze", i, took[i])
			}
			if took[i] >= 4*time.Second {
				waited++
			}
		}
		abandoned := h.scrapeMetric(`switchyard_upstream_abandoned_attempts_total`)
		retried := h.scrapeMetric(`switchyard_proxy_retries_total{routing_key="",model="m",reason="pylon_unresponsive"}`)
		if waited == 0 || abandoned != strconv.Itoa(waited) || retried != abandoned {
			t.Errorf("%d requests waited for the frozen pylon; abandoned %q, pylon_unresponsive retries %q, want both %d", waited, abandoned, retried, waited)
		}
		thaw()
	})
}

// A pylon whose heartbeats stop (it expires after three) has the requests it has not
// begun to answer abandoned at once, even though it still answers health probes; one that
// deregisters drains: the request it holds gets its answer.
func TestExpiredPylonRequestsFailOverDeregisteredDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		release := make(chan struct{})
		slow := func(int, *fasthttp.RequestCtx) { <-release }
		h.registerBeating(h.pylon("silent", "c-silent", idleLoad(), slow), 1000)
		h.register(h.pylon("ok", "c-ok", idleLoad(), nil))
		results, took := h.concurrently(2, func() response { return h.chat(nil) })
		for i, r := range results {
			if r.status != 200 || !strings.Contains(r.body, `"served_by":"ok"`) || took[i] > 3*time.Second+time.Second/4 {
				t.Errorf("request %d: %d after %v, want 200 from ok within the 3 s expiry: %s", i, r.status, took[i], r.body)
			}
		}
		if got := h.scrapeMetric(`switchyard_upstream_abandoned_attempts_total`); got != "1" {
			t.Errorf("abandoned attempts %q, want 1 (the request the silent pylon held)", got)
		}
		close(release)

		drained := make(chan struct{})
		h.register(h.pylon("draining", "c-draining", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			<-drained
			ctx.SetBodyString(`{"served_by":"draining"}`)
		}))
		ok := h.do("DELETE", wire.RegistrationPath+"ok", nil, nil)
		if ok.status/100 != 2 {
			t.Fatalf("deregister ok: %d %s", ok.status, ok.body)
		}
		synctest.Wait()
		var r response
		var wg sync.WaitGroup
		wg.Go(func() { r = h.chat(nil) })
		synctest.Wait() // the request waits at the draining pylon
		if got := h.do("DELETE", wire.RegistrationPath+"draining", nil, nil); got.status/100 != 2 {
			t.Fatalf("deregister draining: %d %s", got.status, got.body)
		}
		time.Sleep(10 * time.Second)
		close(drained)
		wg.Wait()
		if r.status != 200 || !strings.Contains(r.body, `"served_by":"draining"`) {
			t.Errorf("request held by a deregistered pylon: %d %s, want its answer", r.status, r.body)
		}
	})
}

// When a pylon expires (its heartbeats stopped), a stream it has sent nothing for half
// the time since its last heartbeat ends at once with an error event instead of hanging
// (nothing else bounds a stream's silence); a stream it is still feeding runs to its end.
func TestExpiredPylonStalledStreamEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin"}`)
		release := make(chan struct{})
		stream := func(events int, gap time.Duration) func(int, *fasthttp.RequestCtx) {
			return func(_ int, ctx *fasthttp.RequestCtx) {
				ctx.SetContentType("text/event-stream")
				ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
					for range events {
						_, _ = w.WriteString("data: {}\n\n")
						if w.Flush() != nil {
							return
						}
						if gap == 0 { // stops feeding the stream (for a minute: a test that fails ends)
							select {
							case <-release:
							case <-time.After(time.Minute):
							}
						}
						time.Sleep(gap)
					}
					_, _ = w.WriteString("data: [DONE]\n\n")
				})
			}
		}
		h.registerBeating(h.pylon("stalled", "c-stalled", idleLoad(), stream(2, 0)), 1000)
		h.registerBeating(h.pylon("flowing", "c-flowing", idleLoad(), stream(60, 100*time.Millisecond)), 1000)
		results, took := h.concurrently(2, func() response { return h.do("POST", "/v1/chat/completions", streamBody, nil) })
		for i, r := range results {
			switch r.headers["X-Inference-Server-Id"] {
			case "stalled":
				if !strings.Contains(r.body, `"code":"`) || strings.Contains(r.body, "[DONE]") || took[i] > 3*time.Second+time.Second/4 {
					t.Errorf("the stalled stream: ended after %v with %q, want an error event at its pylon's 3 s expiry", took[i], r.body)
				}
			case "flowing":
				if !strings.HasSuffix(r.body, "data: [DONE]\n\n") || took[i] < 6*time.Second {
					t.Errorf("the flowing stream: ended after %v with %q, want all 60 events and [DONE]", took[i], r.body[max(0, len(r.body)-80):])
				}
			default:
				t.Errorf("request %d: %d from %q: %s", i, r.status, r.headers["X-Inference-Server-Id"], r.body)
			}
		}
		close(release)
	})
}

// concurrently sends n requests at once with send and returns their responses and how long
// after the start each ended.
func (h *harness) concurrently(n int, send func() response) ([]response, []time.Duration) {
	start := time.Now()
	var wg sync.WaitGroup
	results, took := make([]response, n), make([]time.Duration, n)
	for i := range results {
		wg.Go(func() {
			results[i] = send()
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	return results, took
}

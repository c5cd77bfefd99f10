package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Loopback end-to-end versions of the reference router's load-balancing integration tests,
// with the real binaries. The reference suite reports synthetic stats; here the load is
// real: requests sent straight to a pylon (bypassing the gateway) sit in the pylon's queue
// or occupy its engine's slots, the pylon publishes them, and each test waits on
// /debug/state until the gateway sees that load before it sends probes through the gateway.
//
// Queued work that must stay put while probes are served by the same engine, or that the
// test must drain at a moment of its choosing, is *held*: each engine also serves the
// model "held", whose test-control hang keeps requests before their response headers
// until released. A held request carries x-model: dummy-model, so its pylon counts it as a
// Pending dummy-model request (its own priority, its x-input-tokens) while the engine holds
// it as a "held" request; probes for dummy-model run unhindered. Input throughput is pinned
// (--benchmark-pin-input-tps) wherever the estimates are asserted, so that the probes'
// own throughput samples cannot move them.

const heldModel = "held"

var (
	pinTPS = []string{"--benchmark-pin-input-tps"}
	// quickEngine answers probes at once (no prefill delay, two tokens 1 ms apart) and
	// also serves the held model (held through /test-control, so enabled).
	quickEngine = []string{"--num-tokens", "2", "--token-delay-ms", "1", "--model-name", "dummy-model", "--model-name", heldModel, "--enable-test-control"}
)

// directCall is one inference request sent straight to a pylon on its own connection.
type directCall struct {
	conn   net.Conn
	done   chan struct{}
	status int // set before done closes
}

var directSeq atomic.Uint64

// direct sends a chat request for body model model (streamed or not) straight to backend
// id's pylon with x-model dummy-model, inputTokens and the given extra headers, and
// returns at once; the response is read in the background. The connection is closed at
// cleanup.
func (f *fleetE2E) direct(id, model string, inputTokens int, stream bool, headers map[string]string) *directCall {
	f.t.Helper()
	conn, err := net.Dial("tcp", f.pylons[id])
	if err != nil {
		f.t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	body := `{"model":"` + model + `","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"x"}]}`
	var req strings.Builder
	fmt.Fprintf(&req, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Type: application/json\r\n", f.pylons[id])
	fmt.Fprintf(&req, "x-request-id: direct-%d\r\nx-model: dummy-model\r\nx-input-tokens: %d\r\n", directSeq.Add(1), inputTokens)
	for k, v := range headers {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, req.String()); err != nil {
		_ = conn.Close()
		f.t.Fatal(err)
	}
	c := &directCall{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		r := bufio.NewReader(conn)
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if fields := strings.Fields(line); len(fields) >= 2 {
			c.status, _ = strconv.Atoi(fields[1])
		}
		_, _ = io.Copy(io.Discard, r) // until the response ends (Connection: close)
	}()
	f.t.Cleanup(c.stop)
	return c
}

// stop closes the connection and waits for the reader.
func (c *directCall) stop() {
	_ = c.conn.Close()
	<-c.done
}

// wait returns the response status once the response has been read completely.
func (c *directCall) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.done:
		return c.status
	case <-time.After(10 * time.Second):
		t.Fatal("a direct request did not complete within 10s")
		return 0
	}
}

// hold makes backend id's engine hold (true) or release (false) the held model's requests.
func (f *fleetE2E) hold(id string, on bool) {
	f.t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("PUT")
	req.SetRequestURI("http://" + f.engines[id] + "/test-control/models/" + heldModel)
	req.SetConnectionClose()
	req.SetBodyString(`{"hang":` + strconv.FormatBool(on) + `}`)
	if err := fasthttp.DoTimeout(req, resp, 5*time.Second); err != nil || resp.StatusCode() != 200 {
		f.t.Fatalf("test-control of %s: %v %d %s", id, err, resp.StatusCode(), resp.Body())
	}
}

// servedBy sends n chat requests through the gateway and counts the serving backends;
// any non-200 fails the test with the gateway's state.
func (f *fleetE2E) servedBy(n int, headers map[string]string) map[string]int {
	f.t.Helper()
	got := map[string]int{}
	for i := range n {
		status, body, h := f.chat(headers)
		if status != 200 {
			_, state, _ := f.do("GET", "/debug/state", nil, nil)
			f.t.Fatalf("request %d %v: %d %s\nstate: %s", i, headers, status, body, state)
		}
		got[h["x-inference-server-id"]]++
	}
	return got
}

// With real binaries: power-of-n (no lb config) sends all 20 probes to the backend with no
// queued tokens rather than the one with 1000 queued tokens (input tps 1000 each). The
// queued work is a held 1000-token request on the busy backend.
func TestLoopbackE2EPowerOfNQueuedTokens(t *testing.T) {
	f := startFleetWith(t, "",
		e2eBackend{backendSpec: backendSpec{"busy", quickEngine, 1000}, pylonArgs: pinTPS},
		e2eBackend{backendSpec: backendSpec{"idle", quickEngine, 1000}, pylonArgs: pinTPS},
	)
	f.hold("busy", true)
	load := f.direct("busy", heldModel, 1000, false, nil)
	f.waitState(func(b backendState) bool {
		queued := b.Models["dummy-model"].Stats.QueuedInputSize
		if b.ID == "busy" {
			return queued == 1000
		}
		return queued == 0
	})
	if got := f.servedBy(20, map[string]string{"x-input-tokens": "10"}); got["idle"] != 20 {
		t.Errorf("served by %v, want 20 × idle", got)
	}
	f.hold("busy", false)
	if status := load.wait(t); status != 200 {
		t.Errorf("the held request ended with %d", status)
	}
}

// Cluster aggregation with real binaries, with the reference's numbers.
// Cluster "shared" has two backends (s1, s2), cluster "single" one; input tps 100 each.
// Held requests queue 130 tokens on each shared backend and 120 on the single one:
// power-of-n (two clusters, both compared) sends every probe to the single cluster, at
// 1.2 s, rather than to the shared one, at 1.3 s. Once the shared backends drain, every
// probe goes to the shared cluster, round-robin over its two backends (5 + 5).
//
// With real pylons the shared cluster's 1.3 s is its priority map, which is cluster-scoped
// (the most recently updated backend's map is the cluster's): each shared pylon publishes
// ceil(130 / 100 s) = 1.3 s, the same as the summed view 260 tokens / 200 tokens/s that the
// reference's synthetic stats (no priority map) give. Loading both backends equally keeps
// the test independent of which backend reported last.
func TestLoopbackE2EClusterAggregation(t *testing.T) {
	backend := func(id, cluster string) e2eBackend {
		return e2eBackend{backendSpec: backendSpec{id, quickEngine, 100}, cluster: cluster, pylonArgs: pinTPS}
	}
	f := startFleetWith(t, "", backend("s1", "shared"), backend("s2", "shared"), backend("single", "single"))
	for _, id := range []string{"s1", "s2", "single"} {
		f.hold(id, true)
	}
	want := map[string]uint64{"s1": 130, "s2": 130, "single": 120}
	load := make([]*directCall, 0, len(want))
	for id, tokens := range want {
		load = append(load, f.direct(id, heldModel, int(tokens), false, nil))
	}
	cluster := map[string]string{"s1": "shared", "s2": "shared", "single": "single"}
	f.waitState(func(b backendState) bool {
		st := b.Models["dummy-model"].Stats
		// Estimate in ms = tokens / (100 tokens/s) × 1000.
		return b.ClusterID == cluster[b.ID] && st.QueuedInputSize == want[b.ID] && st.QueueTimeEstimateMs["0"] == want[b.ID]*10
	})
	probe := map[string]string{"x-input-tokens": "1"}
	if got := f.servedBy(10, probe); got["single"] != 10 {
		t.Errorf("shared cluster at 1.3 s vs single at 1.2 s: served by %v, want 10 × single", got)
	}

	f.hold("s1", false)
	f.hold("s2", false)
	f.waitState(func(b backendState) bool {
		queued := b.Models["dummy-model"].Stats.QueuedInputSize
		if b.ID == "single" {
			return queued == 120
		}
		return queued == 0
	})
	if got := f.servedBy(10, probe); got["s1"] != 5 || got["s2"] != 5 {
		t.Errorf("drained shared cluster: served by %v, want 5 × s1 and 5 × s2 (round-robin)", got)
	}
	f.hold("single", false)
	for _, c := range load {
		if status := c.wait(t); status != 200 {
			t.Errorf("a held request ended with %d", status)
		}
	}
}

// With real binaries: wait-and-widen prefers the backend with input tps 200 over the one
// with tps 10 for 10-token requests (TTFT ≈ 50 ms vs 1 s).
func TestLoopbackE2EWaitAndWidenPrefersThroughput(t *testing.T) {
	quick := []string{"--num-tokens", "2", "--token-delay-ms", "1"}
	f := startFleetWith(t, `{"default":"wait-and-widen"}`,
		e2eBackend{backendSpec: backendSpec{"slow", quick, 10}, pylonArgs: pinTPS},
		e2eBackend{backendSpec: backendSpec{"fast", quick, 200}, pylonArgs: pinTPS},
	)
	if got := f.servedBy(10, map[string]string{"x-input-tokens": "10"}); got["fast"] != 10 {
		t.Errorf("served by %v, want 10 × fast", got)
	}
}

// With real binaries: with x-max-wait-ms 250, wait-and-widen waits for the slower backend
// when the fastest one is full, and always chooses the available one. The fast engine's
// four slots (max concurrency 4, reported in its stats pings) are filled by long streams
// sent straight to its pylon; they are cut at cleanup.
func TestLoopbackE2EWaitForAvailableBackend(t *testing.T) {
	f := startFleetWith(t, `{"default":"wait-and-widen"}`,
		e2eBackend{
			backendSpec: backendSpec{"fast", []string{"--max-concurrent-requests", "4", "--prefill-tokens-per-s", "20000", "--num-tokens", "2", "--token-delay-ms", "100"}, 20000},
			pylonArgs:   pinTPS,
		},
		e2eBackend{
			backendSpec: backendSpec{"free", []string{"--max-concurrent-requests", "4", "--prefill-tokens-per-s", "5000", "--num-tokens", "2", "--token-delay-ms", "1"}, 5000},
			pylonArgs:   pinTPS,
		},
	)
	for range 4 {
		// 100 tokens 100 ms apart: each stream holds an engine slot for ~10 s.
		f.direct("fast", "dummy-model", 1, true, map[string]string{"x-output-tokens": "100"})
	}
	f.waitState(func(b backendState) bool {
		st := b.Models["dummy-model"].Stats
		if b.ID == "fast" {
			return st.NumRunningQueries == 4 && st.MaxEngineConcurrency == 4
		}
		return st.NumRunningQueries == 0 && st.MaxEngineConcurrency == 4
	})
	if got := f.servedBy(5, map[string]string{"x-input-tokens": "400", "x-max-wait-ms": "250"}); got["free"] != 5 {
		t.Errorf("served by %v, want 5 × free", got)
	}
}

// Comparator queue-time with two candidates, with real binaries. A pylon's estimate for
// priority p is its prompt work at priorities ≤ p over its input tps (Pending work counts
// at its own priority). Held requests queue 500 tokens at priority 4 on a (estimates {4:
// 500 ms}) and 50 tokens at priority 0 plus 500 at priority 9 on b ({0: 50 ms, 9: 550 ms}),
// tps 1000 each. A priority-4 request sees 500 ms on a and 50 ms on b → b, although b has
// more queued work in total; a request without x-priority (priority 0) sees 0 ms on a and
// 50 ms on b → a. Checked for power-of-n (sample_count 2) and, selected by
// x-routing-method, wait-and-widen (n 2, one bucket).
func TestLoopbackE2EPriorityQueueEstimates(t *testing.T) {
	cfg := `{"default":"power-of-n",
		"request_algorithms":{"wait-and-widen":{"algorithm":"wait-and-widen","comparator":"queue-time","n":2,"ttft_bucket_size_ms":100000}},
		"models":{"dummy-model":{"algorithm":"power-of-n","comparator":"queue-time","sample_count":2}}}`
	f := startFleetWith(t, cfg,
		e2eBackend{backendSpec: backendSpec{"a", quickEngine, 1000}, pylonArgs: pinTPS},
		e2eBackend{backendSpec: backendSpec{"b", quickEngine, 1000}, pylonArgs: pinTPS},
	)
	f.hold("a", true)
	f.hold("b", true)
	load := []*directCall{
		f.direct("a", heldModel, 500, false, map[string]string{"x-priority": "4"}),
		f.direct("b", heldModel, 50, false, nil),
		f.direct("b", heldModel, 500, false, map[string]string{"x-priority": "9"}),
	}
	f.waitState(func(b backendState) bool {
		est := b.Models["dummy-model"].Stats.QueueTimeEstimateMs
		if b.ID == "a" {
			return len(est) == 1 && est["4"] == 500
		}
		return len(est) == 2 && est["0"] == 50 && est["9"] == 550
	})
	for _, method := range []string{"", "wait-and-widen"} {
		urgent := map[string]string{"x-input-tokens": "1", "x-priority": "4"}
		plain := map[string]string{"x-input-tokens": "1"}
		if method != "" {
			urgent["x-routing-method"], plain["x-routing-method"] = method, method
		}
		if got := f.servedBy(5, urgent); got["b"] != 5 {
			t.Errorf("%q, priority 4 (a 500 ms, b 50 ms): served by %v, want 5 × b", method, got)
		}
		if got := f.servedBy(5, plain); got["a"] != 5 {
			t.Errorf("%q, priority 0 (a 0 ms, b 50 ms): served by %v, want 5 × a", method, got)
		}
	}
	f.hold("a", false)
	f.hold("b", false)
	for _, c := range load {
		if status := c.wait(t); status != 200 {
			t.Errorf("a held request ended with %d", status)
		}
	}
}

// With real binaries: input-work admission (max_input_work_seconds 0.5, input tps 100, 100
// tokens queued — a held request —, 50 more → 1.5 s) → 503 overloaded_error; an
// unknown model → 404 no_eligible_candidates; the model registered but INACTIVE (its only
// pylon draining after SIGTERM while the held request is in flight) → 503 without that
// code; once the pylon has drained and deregistered → 404 no_eligible_candidates again.
func TestLoopbackE2EInputWorkAndRegistrationStates(t *testing.T) {
	f := startFleetWith(t, `{"default":"power-of-n","models":{"dummy-model":{"algorithm":"power-of-n","max_input_work_seconds":0.5}}}`,
		e2eBackend{backendSpec: backendSpec{"p", quickEngine, 100}, pylonArgs: pinTPS},
	)
	f.hold("p", true)
	held := f.direct("p", heldModel, 100, false, nil)
	f.waitState(func(b backendState) bool { return b.Models["dummy-model"].Stats.QueuedInputSize == 100 })
	probe := map[string]string{"x-input-tokens": "50"}
	if status, body, h := f.chat(probe); status != 503 || h["x-stargate-error-code"] != "overloaded_error" || !strings.Contains(body, "input work admission limit exceeded") {
		t.Errorf("1.5 s of input work over 0.5 s: %d %q %s", status, h["x-stargate-error-code"], body)
	}
	if status, _, h := f.chat(map[string]string{"x-model": "unknown-model", "x-input-tokens": "1"}); status != 404 || h["x-stargate-error-code"] != "no_eligible_candidates" {
		t.Errorf("unknown model: %d %q", status, h["x-stargate-error-code"])
	}
	if err := f.pylonProcs["p"].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Draining: the pylon re-registers its model INACTIVE and waits for the held request.
	status, code := f.chatUntil(probe, func(_ int, code string) bool { return code != "overloaded_error" })
	if status != 503 || code == "no_eligible_candidates" {
		t.Errorf("registered but INACTIVE: %d %q, want 503 without no_eligible_candidates", status, code)
	}
	f.hold("p", false)
	if status := held.wait(t); status != 200 {
		t.Errorf("the held request ended with %d while its pylon drained", status)
	}
	status, code = f.chatUntil(probe, func(status int, _ string) bool { return status == 404 })
	if status != 404 || code != "no_eligible_candidates" {
		t.Errorf("after the pylon deregistered: %d %q, want 404 no_eligible_candidates", status, code)
	}
}

// chatUntil sends chat requests (20 ms apart, for at most 10 s) until done holds for the
// answer's status and x-stargate-error-code; it returns the last answer.
func (f *fleetE2E) chatUntil(headers map[string]string, done func(status int, code string) bool) (status int, code string) {
	poll(10*time.Second, 20*time.Millisecond, func() bool {
		var h map[string]string
		status, _, h = f.chat(headers)
		code = h["x-stargate-error-code"]
		return done(status, code)
	})
	return status, code
}

// The affinity hold with real binaries, the parts after the stickiness of
// TestLoopbackE2EAffinity: affinity config (virtual nodes 8, selection 1, X = 100 ms, n 3)
// over engines with one slot each. Once the key's primary is full (a long stream sent
// straight to its pylon), a request with the key and x-max-wait-ms 10 fails with 503;
// without wait headers it goes elsewhere, only after ≥ 100 ms; with x-max-wait-ms 500 and
// x-request-slo-ms 5000 it is served by a non-primary after ≥ 100 ms.
func TestLoopbackE2EAffinityHold(t *testing.T) {
	cfg := `{"default":"power-of-n","models":{"dummy-model":{"algorithm":"wait-and-widen","cache_affinity_virtual_nodes":8,"cache_affinity_backend_selection_count":1,"cache_affinity_wait_ms":100,"n":3}}}`
	oneSlot := []string{"--max-concurrent-requests", "1", "--num-tokens", "2", "--token-delay-ms", "20"}
	f := startFleet(t, cfg, backendSpec{"p1", oneSlot, 100_000}, backendSpec{"p2", oneSlot, 100_000}, backendSpec{"p3", oneSlot, 100_000})
	f.waitState(func(b backendState) bool { return b.Models["dummy-model"].Stats.MaxEngineConcurrency == 1 })
	withKey := func(extra ...string) map[string]string {
		h := map[string]string{"x-cache-affinity-key": "session-98", "x-input-tokens": "100"}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		return h
	}
	served := f.servedBy(5, withKey())
	if len(served) != 1 {
		t.Fatalf("one key spread over %v", served)
	}
	primary := ""
	for id := range served {
		primary = id
	}
	// 500 tokens 20 ms apart hold the primary's only slot for ~10 s (cut at cleanup).
	f.direct(primary, "dummy-model", 1, true, map[string]string{"x-output-tokens": "500"})
	f.waitState(func(b backendState) bool {
		running := b.Models["dummy-model"].Stats.NumRunningQueries
		if b.ID == primary {
			return running == 1
		}
		return running == 0
	})
	if status, body, _ := f.chat(withKey("x-max-wait-ms", "10")); status != 503 {
		t.Errorf("x-max-wait-ms 10 within the 100 ms hold: %d %s", status, body)
	}
	for _, extra := range [][]string{nil, {"x-max-wait-ms", "500", "x-request-slo-ms", "5000"}} {
		start := time.Now()
		status, body, h := f.chat(withKey(extra...))
		took := time.Since(start)
		if status != 200 || h["x-inference-server-id"] == primary {
			t.Errorf("%v, primary %s full: %d from %q: %s", extra, primary, status, h["x-inference-server-id"], body)
		}
		if took < 100*time.Millisecond {
			t.Errorf("%v: served after %v, want ≥ 100 ms (the affinity hold)", extra, took)
		}
	}
}

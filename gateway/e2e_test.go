package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// Loopback end-to-end tests with the real binaries (bin/engine, bin/pylon, bin/gateway
// built into a temp dir) on 127.0.0.1. Skipped with -short.

// binary builds cmd/<name> once per test binary (skipped with -short).
func binary(t *testing.T, name string) string {
	t.Helper()
	return mocktest.Binary(t, "../cmd/"+name)
}

// start runs a binary in its own process group, stopped (SIGTERM, then SIGKILL) at cleanup.
func start(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary(t, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("%s %v log (last lines):\n%s", name, args, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		_ = logf.Close()
	})
	return cmd
}

// fleetE2E is one gateway with pylon+engine pairs.
type fleetE2E struct {
	t       *testing.T
	gateway string
	admin   string // the gateway's admin listener
	client  *fasthttp.HostClient
	adminC  *fasthttp.HostClient
	// pylons and engines map backend ids to their listen addresses (for requests that
	// bypass the gateway and for the engines' /test-control).
	pylons, engines map[string]string
	// pylonProcs and engineProcs map backend ids to their pylon and engine processes (to
	// signal them).
	pylonProcs, engineProcs map[string]*exec.Cmd
}

type backendSpec struct {
	id         string
	engineArgs []string
	inputTPS   int
}

// e2eBackend is a backendSpec with a cluster id and extra pylon flags.
type e2eBackend struct {
	backendSpec
	cluster   string   // --cluster-id; "" = the backend id
	pylonArgs []string // appended to the pylon's flags
}

func startFleet(t *testing.T, lbConfig string, backends ...backendSpec) *fleetE2E {
	t.Helper()
	specs := make([]e2eBackend, len(backends))
	for i, b := range backends {
		specs[i] = e2eBackend{backendSpec: b}
	}
	return startFleetWith(t, lbConfig, specs...)
}

func startFleetWith(t *testing.T, lbConfig string, backends ...e2eBackend) *fleetE2E {
	t.Helper()
	gw, admin := mocktest.FreeAddr(t), mocktest.FreeAddr(t)
	args := []string{"--http-listen-addr", gw, "--admin-listen-addr", admin, "--health-probe-interval-ms", "200", "--log-level", "debug"}
	if lbConfig != "" {
		p := filepath.Join(t.TempDir(), "lb-config.json")
		if err := os.WriteFile(p, []byte(lbConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--lb-config-path", p)
	}
	start(t, "gateway", args...)
	f := &fleetE2E{
		t: t, gateway: gw, admin: admin, client: &fasthttp.HostClient{Addr: gw, MaxConns: 64}, adminC: &fasthttp.HostClient{Addr: admin},
		pylons: map[string]string{}, engines: map[string]string{}, pylonProcs: map[string]*exec.Cmd{}, engineProcs: map[string]*exec.Cmd{},
	}
	for _, b := range backends {
		eng, pyl := mocktest.FreeAddr(t), mocktest.FreeAddr(t)
		f.engines[b.id], f.pylons[b.id] = eng, pyl
		f.engineProcs[b.id] = start(t, "engine", append([]string{"--http-listen-addr", eng}, b.engineArgs...)...)
		pargs := []string{
			"--http-listen-addr", pyl, "--admin-listen-addr", mocktest.FreeAddr(t), "--upstream-http-base-url", "http://" + eng, "--model-name", "dummy-model",
			"--gateway", "http://" + admin, "--inference-server-id", b.id, "--initial-input-tps", strconv.Itoa(b.inputTPS),
			"--min-update-interval-ms", "200", "--log-level", "warn",
		}
		if b.cluster != "" {
			pargs = append(pargs, "--cluster-id", b.cluster)
		}
		f.pylonProcs[b.id] = start(t, "pylon", append(pargs, b.pylonArgs...)...)
	}
	t.Cleanup(f.client.CloseIdleConnections)
	t.Cleanup(f.adminC.CloseIdleConnections)
	f.waitRoutable(len(backends))
	return f
}

// poll calls done every period until it holds or timeout passes; it reports whether it
// held.
func poll(timeout, period time.Duration, done func() bool) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(period) {
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (f *fleetE2E) waitRoutable(n int) {
	f.t.Helper()
	if poll(20*time.Second, 50*time.Millisecond, func() bool {
		var st struct {
			Backends []struct {
				Routable bool `json:"routable"`
			} `json:"backends"`
		}
		status, body, _ := f.do("GET", "/debug/state", nil, nil)
		if status != 200 || json.Unmarshal([]byte(body), &st) != nil {
			return false
		}
		routable := 0
		for _, b := range st.Backends {
			if b.Routable {
				routable++
			}
		}
		return routable >= n
	}) {
		return
	}
	_, body, _ := f.do("GET", "/debug/state", nil, nil)
	f.t.Fatalf("fleet not routable within 20s:\n%s", body)
}

type backendState struct {
	ID        string `json:"id"`
	ClusterID string `json:"cluster_id"`
	Routable  bool   `json:"routable"`
	Models    map[string]struct {
		Stats struct {
			NumRunningQueries    uint64  `json:"num_running_queries"`
			MaxEngineConcurrency uint64  `json:"max_engine_concurrency"`
			LastMeanInputTPS     float64 `json:"last_mean_input_tps"`
			QueuedInputSize      uint64  `json:"queued_input_size"`
			// QueueTimeEstimateMs is keyed by the priority in decimal.
			QueueTimeEstimateMs map[string]uint64 `json:"queue_time_estimate_ms_by_priority"`
		} `json:"stats"`
	} `json:"models"`
}

// waitState polls /debug/state until ok holds for every backend (bounded).
func (f *fleetE2E) waitState(ok func(backendState) bool) {
	f.t.Helper()
	var body string
	if poll(10*time.Second, 20*time.Millisecond, func() bool {
		var st struct {
			Backends []backendState `json:"backends"`
		}
		_, body, _ = f.do("GET", "/debug/state", nil, nil)
		if json.Unmarshal([]byte(body), &st) != nil || len(st.Backends) == 0 {
			return false
		}
		for _, b := range st.Backends {
			if !b.Routable || !ok(b) {
				return false
			}
		}
		return true
	}) {
		return
	}
	f.t.Fatalf("gateway state never matched:\n%s", body)
}

func (f *fleetE2E) do(method, path string, body []byte, headers map[string]string) (int, string, map[string]string) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	addr, c := f.gateway, f.client
	if adminPath(path) {
		addr, c = f.admin, f.adminC
	}
	req.SetRequestURI("http://" + addr + path)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.SetBody(body)
	if err := c.DoTimeout(req, resp, 20*time.Second); err != nil {
		return 0, err.Error(), nil
	}
	h := map[string]string{}
	for k, v := range resp.Header.All() {
		h[strings.ToLower(string(k))] = string(v)
	}
	return resp.StatusCode(), string(resp.Body()), h
}

func (f *fleetE2E) chat(headers map[string]string) (int, string, map[string]string) {
	return f.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","messages":[{"role":"user","content":"hello"}]}`), headers)
}

// With real binaries: require_cache_affinity_key → 400 without the header, 200 with it;
// and stickiness: 20 requests with one key stay on one backend.
func TestLoopbackE2EAffinity(t *testing.T) {
	cfg := `{"default":"power-of-n","models":{"dummy-model":{"algorithm":"wait-and-widen","require_cache_affinity_key":true,"cache_affinity_virtual_nodes":8,"cache_affinity_backend_selection_count":1,"cache_affinity_wait_ms":100,"n":3}}}`
	fast := []string{"--num-tokens", "3", "--token-delay-ms", "1"}
	f := startFleet(t, cfg, backendSpec{"p1", fast, 1000}, backendSpec{"p2", fast, 1000}, backendSpec{"p3", fast, 1000})
	if status, body, _ := f.chat(nil); status != 400 || !strings.Contains(body, "x-cache-affinity-key") {
		t.Fatalf("without the key: %d %s", status, body)
	}
	primary := ""
	for i := range 20 {
		status, body, h := f.chat(map[string]string{"x-cache-affinity-key": "session-42"})
		if status != 200 {
			_, state, _ := f.do("GET", "/debug/state", nil, nil)
			t.Fatalf("request %d: %d %s\nstate: %s", i, status, body, state)
		}
		if primary == "" {
			primary = h["x-inference-server-id"]
		}
		if h["x-inference-server-id"] != primary {
			t.Fatalf("request %d left the primary %s for %s", i, primary, h["x-inference-server-id"])
		}
	}
}

// With real binaries: a full fast backend and an idle slow one, no wait headers → 200 from
// the slow one.
func TestLoopbackE2EWaitForSlowBackend(t *testing.T) {
	cfg := `{"default":"wait-and-widen"}`
	f := startFleet(t, cfg,
		backendSpec{"fast", []string{"--max-concurrent-requests", "4", "--prefill-tokens-per-s", "20000", "--num-tokens", "15", "--token-delay-ms", "100"}, 20000},
		backendSpec{"slow", []string{"--max-concurrent-requests", "4", "--prefill-tokens-per-s", "5000", "--num-tokens", "2", "--token-delay-ms", "1"}, 5000},
	)
	// Fill the fast backend's four slots with long streams.
	var wg sync.WaitGroup
	landed := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", f.gateway)
			if err != nil {
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
			body := `{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"x"}]}`
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-input-tokens: 400\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			r := bufio.NewReader(conn)
			for {
				line, err := r.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
				if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "x-inference-server-id") {
					landed <- strings.TrimSpace(v)
				}
			}
			_, _ = r.ReadString(0) // hold the stream until it ends
		}()
		time.Sleep(30 * time.Millisecond)
	}
	for range 4 {
		select {
		case id := <-landed:
			if id != "fast" {
				t.Fatalf("a filler stream landed on %s", id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("filler streams did not start")
		}
	}
	// Wait until the gateway sees the fast backend full and the slow one idle with a
	// known throughput and engine concurrency (reported by the engines' stats streams).
	f.waitState(func(b backendState) bool {
		s := b.Models["dummy-model"].Stats
		if b.ID == "fast" {
			return s.NumRunningQueries >= 4 && s.MaxEngineConcurrency == 4
		}
		return s.MaxEngineConcurrency == 4 && s.LastMeanInputTPS > 0 && s.NumRunningQueries == 0
	})
	start := time.Now()
	status, body, h := f.chat(map[string]string{"x-input-tokens": "4000"})
	if status != 200 || h["x-inference-server-id"] != "slow" {
		_, state, _ := f.do("GET", "/debug/state", nil, nil)
		t.Fatalf("got %d from %q: %s\nstate: %s", status, h["x-inference-server-id"], body, state)
	}
	if got := time.Since(start); got < 100*time.Millisecond {
		t.Errorf("time to headers %v, want ≥ 100ms", got)
	}
	wg.Wait()
}

// With real binaries: random reaches all three backends within 30 requests, and pulsar
// keeps one key on one backend 20/20.
func TestLoopbackE2ERandomAndPulsar(t *testing.T) {
	quick := []string{"--num-tokens", "2", "--token-delay-ms", "1"}
	f := startFleet(t, `{"default":"random","request_algorithms":{"pulsar":{"algorithm":"pulsar","seed":"e2e"}}}`,
		backendSpec{"r1", quick, 1000}, backendSpec{"r2", quick, 1000}, backendSpec{"r3", quick, 1000})
	seen := map[string]int{}
	for i := range 30 {
		status, body, h := f.chat(nil)
		if status != 200 {
			t.Fatalf("random request %d: %d %s", i, status, body)
		}
		seen[h["x-inference-server-id"]]++
	}
	if len(seen) != 3 {
		t.Errorf("random over 30 requests hit %v", seen)
	}
	seen = map[string]int{}
	for i := range 20 {
		status, body, h := f.chat(map[string]string{"x-routing-method": "pulsar", "x-cache-affinity-key": "prefix-7"})
		if status != 200 {
			t.Fatalf("pulsar request %d: %d %s", i, status, body)
		}
		seen[h["x-inference-server-id"]]++
	}
	if len(seen) != 1 {
		t.Errorf("pulsar spread one key over %v", seen)
	}
	// Item 92 (part): an unknown model is 404 no_eligible_candidates.
	if status, _, h := f.chat(map[string]string{"x-model": "unknown-model"}); status != 404 || h["x-stargate-error-code"] != "no_eligible_candidates" {
		t.Errorf("unknown model: %d %v", status, h["x-stargate-error-code"])
	}
}

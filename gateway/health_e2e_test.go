package gateway_test

import (
	"encoding/json"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Passive health with the real binaries: an engine killed behind a live pylon, a pylon
// frozen with SIGSTOP, a backend that registers without a measured throughput.

// trafficResult is one request of loadFor.
type trafficResult struct {
	start   time.Time
	took    time.Duration
	status  int
	backend string
	body    string // of a failure
}

// loadFor runs clients loops of streamed chat requests (x-input-tokens tokens) for d and
// returns every request's outcome; at runs each of its functions at its offset.
func (f *fleetE2E) loadFor(clients int, d time.Duration, tokens int, at map[time.Duration]func()) []trafficResult {
	f.t.Helper()
	var (
		mu  sync.Mutex
		out []trafficResult
		wg  sync.WaitGroup
	)
	begin := time.Now()
	end := begin.Add(d)
	body := []byte(`{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
	for range clients {
		wg.Go(func() {
			for time.Now().Before(end) {
				start := time.Now()
				status, answer, h := f.do("POST", "/v1/chat/completions", body, map[string]string{"x-input-tokens": strconv.Itoa(tokens)})
				r := trafficResult{start: start, took: time.Since(start), status: status, backend: h["x-inference-server-id"]}
				if status != 200 {
					r.body = answer
				}
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	for offset, fn := range at {
		wg.Go(func() {
			time.Sleep(offset)
			fn()
		})
	}
	wg.Wait()
	return out
}

// summary counts outcomes of the requests started in [from, to).
func summary(rs []trafficResult, from, to time.Time) (n, failed int, maxTook time.Duration, by map[string]int) {
	by = map[string]int{}
	for _, r := range rs {
		if r.start.Before(from) || !r.start.Before(to) {
			continue
		}
		n++
		if r.status != 200 {
			failed++
		}
		maxTook = max(maxTook, r.took)
		by[r.backend]++
	}
	return n, failed, maxTook, by
}

var quickStreams = []string{"--num-tokens", "4", "--token-delay-ms", "5", "--prefill-tokens-per-s", "20000"}

// kill -9 of the engine behind a live pylon: no request started after the kill fails
// while the other backend is healthy (the pylon answers retryable, the gateway retries
// and ejects).
func TestLoopbackE2EEngineKilledNoFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("real binaries")
	}
	f := startFleet(t, "", backendSpec{"p1", quickStreams, 20000}, backendSpec{"p2", quickStreams, 20000})
	var killed time.Time
	rs := f.loadFor(4, 4*time.Second, 200, map[time.Duration]func(){
		time.Second: func() {
			killed = time.Now()
			_ = f.engineProcs["p1"].Process.Kill()
		},
	})
	n, failed, maxTook, by := summary(rs, killed, time.Now())
	before, _, _, beforeBy := summary(rs, time.Time{}, killed)
	t.Logf("before the kill: %d requests %v; after: %d requests, %d failed, slowest %v, served by %v", before, beforeBy, n, failed, maxTook, by)
	if n < 50 || failed != 0 {
		t.Errorf("%d of %d requests started after the engine was killed failed, want 0", failed, n)
		for _, r := range rs {
			if r.status != 200 && !r.start.Before(killed) {
				t.Logf("%v after the kill: %d from %q: %s", r.start.Sub(killed), r.status, r.backend, r.body)
			}
		}
	}
	_, state, _ := f.do("GET", "/debug/state", nil, nil)
	t.Logf("state: %s", state)
}

// SIGSTOP of a pylon for 8 s: no request waits on it much longer than the first-byte
// deadline (the 2 s floor for these idle backends), none fails, and the pylon serves
// again once resumed.
func TestLoopbackE2EFrozenPylon(t *testing.T) {
	if testing.Short() {
		t.Skip("real binaries")
	}
	f := startFleet(t, "", backendSpec{"p1", quickStreams, 20000}, backendSpec{"p2", quickStreams, 20000})
	var stopped, resumed time.Time
	rs := f.loadFor(4, 13*time.Second, 200, map[time.Duration]func(){
		time.Second: func() {
			stopped = time.Now()
			_ = f.pylonProcs["p1"].Process.Signal(syscall.SIGSTOP)
		},
		9 * time.Second: func() {
			resumed = time.Now()
			_ = f.pylonProcs["p1"].Process.Signal(syscall.SIGCONT)
		},
	})
	n, failed, maxTook, by := summary(rs, stopped, resumed)
	slow := 0
	for _, r := range rs {
		if r.took > time.Second {
			slow++
		}
	}
	_, _, _, after := summary(rs, resumed.Add(2*time.Second), time.Now())
	t.Logf("while frozen: %d requests, %d failed, slowest %v, %d over 1 s, served by %v; from 2 s after the resume: %v", n, failed, maxTook, slow, by, after)
	if failed != 0 {
		t.Errorf("%d requests failed while a pylon was frozen, want 0", failed)
	}
	// The 2 s floor, two watchdog ticks of 250 ms, and a little scheduling.
	if limit := 2*time.Second + 750*time.Millisecond; maxTook > limit {
		t.Errorf("a request took %v while a pylon was frozen, want at most %v", maxTook, limit)
	}
	if after["p1"] == 0 {
		t.Errorf("the resumed pylon served nothing from 2 s after its resume: %v", after)
	}
}

// A backend registered without a measured input throughput (a pylon without
// --initial-input-tps, as after a restart) is estimated at the median of the others until
// it has measured its own (five samples): it gets requests at once instead of none. Once
// measured, power-of-n with the ttft comparator sends each serial request to the lower
// estimate, so the split then follows the two measured throughputs.
func TestLoopbackE2EBackendWithoutThroughputGetsItsShare(t *testing.T) {
	if testing.Short() {
		t.Skip("real binaries")
	}
	f := startFleet(t, "", backendSpec{"known", quickStreams, 20000}, backendSpec{"fresh", quickStreams, 0})
	var st struct {
		Backends []backendState `json:"backends"`
	}
	_, body, _ := f.do("GET", "/debug/state", nil, nil)
	_ = json.Unmarshal([]byte(body), &st)
	for _, b := range st.Backends {
		if b.ID == "fresh" && b.Models["dummy-model"].Stats.LastMeanInputTPS != 0 {
			t.Fatalf("fresh backend's input tps %v, want 0 (not measured yet)", b.Models["dummy-model"].Stats.LastMeanInputTPS)
		}
	}
	start := time.Now()
	first, served := map[string]int{}, map[string]int{}
	var firstFresh time.Duration
	for i := range 100 {
		status, body, h := f.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","messages":[{"role":"user","content":"x"}]}`), map[string]string{"x-input-tokens": "1000"})
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		id := h["x-inference-server-id"]
		served[id]++
		if i < 20 {
			first[id]++
		}
		if id == "fresh" && firstFresh == 0 {
			firstFresh = time.Since(start)
		}
	}
	t.Logf("100 serial requests in %v: %v; the first 20: %v; the fresh backend's first after %v", time.Since(start), served, first, firstFresh)
	if first["fresh"] < 5 {
		t.Errorf("the backend without a measured throughput served %d of the first 20 requests, want at least 5", first["fresh"])
	}
}

package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// fullStack adds real pylons and mock engines, in process, over in-memory listeners, to a
// harness gateway: the whole gateway → pylon → engine path on virtual time.
type fullStack struct {
	h       *harness
	cancels []context.CancelFunc
	done    sync.WaitGroup
	engines []*mock.Engine
}

func (f *fullStack) dial(addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "gateway" {
		return f.h.adminLn.Dial() // pylons register on the admin listener
	}
	return f.h.dial(host + ":80")
}

func (f *fullStack) listener(host string) *fasthttputil.InmemoryListener {
	ln := fasthttputil.NewInmemoryListener()
	f.h.mu.Lock()
	f.h.lns[host+":80"] = ln
	f.h.mu.Unlock()
	return ln
}

// backend starts engine e<id> and pylon <id> registering with the harness gateway.
func (f *fullStack) backend(t *testing.T, id string, engineCfg mock.Config, inputTPS float64) {
	t.Helper()
	eng, err := mock.New(engineCfg, mock.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	f.engines = append(f.engines, eng)
	eln := f.listener("e" + id)
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		_ = eng.Serve(eln)
	}()
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.Gateways, cfg.AdvertiseURL = "http://e"+id+":80", []string{"http://gateway"}, "http://"+id+":80"
	cfg.ID, cfg.ModelNames, cfg.InitialInputTPS, cfg.PinInputTPS = id, []string{"dummy-model"}, inputTPS, true
	cfg.MinUpdateInterval = 200 * time.Millisecond
	p, err := pylon.New(cfg, pylon.Deps{Listener: f.listener(id), AdminListener: f.listener(id + "-admin"), Dial: f.dial, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancels = append(f.cancels, cancel)
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		if err := p.Run(ctx); err != nil {
			t.Errorf("pylon %s: %v", id, err)
		}
	}()
}

func (f *fullStack) close() {
	for _, c := range f.cancels {
		c()
	}
	for _, e := range f.engines {
		_ = e.Close()
	}
	f.done.Wait()
}

func newFullStack(t *testing.T, lbConfig string) *fullStack {
	t.Helper()
	h := newHarness(t, gateway.Config{}, lbConfig)
	f := &fullStack{h: h}
	t.Cleanup(f.close) // runs before the harness cleanup (LIFO)
	return f
}

// runningOn reports the running count the gateway sees for backend id.
func (f *fullStack) runningOn(id string) uint64 {
	var st struct {
		Backends []backendState `json:"backends"`
	}
	_ = json.Unmarshal([]byte(f.h.do("GET", "/debug/state", nil, nil).body), &st)
	for _, b := range st.Backends {
		if b.ID == id {
			return b.Models["dummy-model"].Stats.NumRunningQueries
		}
	}
	return 0
}

// Waiting for the slow backend, through real pylons and engines on virtual time: the fast
// engine is full (4/4), the slow one idle; a 4000-token request with no wait headers is
// served by the slow one after the 150 ms bucket unlock (+ its 800 ms prefill before
// headers).
func TestFullStackWaitForSlowBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFullStack(t, `{"default":"wait-and-widen"}`)
		f.backend(t, "fast", mock.Config{MaxConcurrentRequests: 4, PrefillTokensPerSecond: 20_000, NumTokens: 20, TokenDelay: 100 * time.Millisecond}, 20_000)
		f.backend(t, "slow", mock.Config{MaxConcurrentRequests: 4, PrefillTokensPerSecond: 5000, NumTokens: 2, TokenDelay: time.Millisecond}, 5000)
		time.Sleep(time.Second) // registrations, RTT probes and engine pings settle
		synctest.Wait()

		fill := make(chan string, 4)
		for range 4 {
			go func() {
				r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"x"}]}`), map[string]string{"x-input-tokens": "400"})
				fill <- r.headers["X-Inference-Server-Id"]
			}()
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := f.runningOn("fast"); got != 4 {
			t.Fatalf("fast backend runs %d requests, want 4", got)
		}
		start := time.Now()
		r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","messages":[{"role":"user","content":"x"}]}`), map[string]string{"x-input-tokens": "4000"})
		took := time.Since(start)
		if r.status != 200 || r.headers["X-Inference-Server-Id"] != "slow" {
			t.Fatalf("got %d from %q: %s", r.status, r.headers["X-Inference-Server-Id"], r.body)
		}
		t.Logf("time to response: %v", took)
		if took < 150*time.Millisecond+800*time.Millisecond {
			t.Errorf("response after %v, want ≥ 150 ms wait + 800 ms prefill", took)
		}
		for range 4 {
			if id := <-fill; id != "fast" {
				t.Errorf("a filler stream was served by %s", id)
			}
		}
	})
}

// The affinity hold through real pylons and engines on virtual time: one key sticks to its
// primary; when the primary is full, a later request goes elsewhere only after the 100 ms
// hold; x-max-wait-ms 10 → 503.
func TestFullStackAffinityHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFullStack(t, `{"default":"power-of-n","models":{"dummy-model":{"algorithm":"wait-and-widen","require_cache_affinity_key":true,"cache_affinity_virtual_nodes":8,"cache_affinity_backend_selection_count":1,"cache_affinity_wait_ms":100,"n":3}}}`)
		for _, id := range []string{"a", "b", "c"} {
			f.backend(t, id, mock.Config{MaxConcurrentRequests: 1, NumTokens: 2, TokenDelay: time.Millisecond, PrefillTokensPerSecond: 100_000}, 100_000)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		body := []byte(`{"model":"dummy-model","messages":[{"role":"user","content":"x"}]}`)
		key := map[string]string{"x-cache-affinity-key": "session-9", "x-input-tokens": "100"}
		if r := f.h.do("POST", "/v1/chat/completions", body, map[string]string{"x-input-tokens": "1"}); r.status != 400 {
			t.Fatalf("without the required key: %d", r.status)
		}
		primary := ""
		for i := range 10 {
			r := f.h.do("POST", "/v1/chat/completions", body, key)
			if r.status != 200 {
				t.Fatalf("request %d: %d %s", i, r.status, r.body)
			}
			if primary == "" {
				primary = r.headers["X-Inference-Server-Id"]
			}
			if r.headers["X-Inference-Server-Id"] != primary {
				t.Fatalf("request %d left the primary %s", i, primary)
			}
		}
		// Occupy the primary's only slot with a long stream.
		done := make(chan struct{})
		var long response
		go func() {
			defer close(done)
			long = f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","max_tokens":200,"stream":true,"messages":[{"role":"user","content":"x"}]}`), map[string]string{"x-cache-affinity-key": "session-9", "x-input-tokens": "100", "x-output-tokens": "200"})
		}()
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if got := f.runningOn(primary); got != 1 {
			<-done
			t.Fatalf("primary runs %d requests, want 1 (long stream: %d from %s)", got, long.status, long.headers["X-Inference-Server-Id"])
		}
		withWait := map[string]string{"x-cache-affinity-key": "session-9", "x-input-tokens": "100", "x-max-wait-ms": "10"}
		if r := f.h.do("POST", "/v1/chat/completions", body, withWait); r.status != 503 {
			t.Errorf("x-max-wait-ms 10 before X: %d %s", r.status, r.body)
		}
		start := time.Now()
		r := f.h.do("POST", "/v1/chat/completions", body, key)
		if r.status != 200 || r.headers["X-Inference-Server-Id"] == primary {
			t.Fatalf("full primary: %d from %s", r.status, r.headers["X-Inference-Server-Id"])
		}
		if took := time.Since(start); took < 100*time.Millisecond {
			t.Errorf("fallback after %v, want ≥ 100 ms", took)
		}
		<-done
	})
}

// A real pylon against a real gateway: after its first registration the heartbeats are
// load updates; when the gateway forgets the backend (here a DELETE, as after a restart),
// the next update is refused and the pylon registers in full at once, so the backend is
// back within one heartbeat.
func TestFullStackLoadUpdates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFullStack(t, "")
		f.backend(t, "p1", mock.Config{MaxConcurrentRequests: 4, NumTokens: 2, TokenDelay: time.Millisecond}, 1000)
		time.Sleep(2100 * time.Millisecond) // about ten heartbeats of 200 ms
		synctest.Wait()
		counter := func(name, result string) int {
			m := f.h.do("GET", "/metrics", nil, nil).body
			for l := range strings.SplitSeq(m, "\n") {
				if v, ok := strings.CutPrefix(l, "switchyard_"+name+`{result="`+result+`"} `); ok {
					n, _ := strconv.Atoi(v)
					return n
				}
			}
			return -1
		}
		if full, updates := counter("registrations_total", "accepted"), counter("load_updates_total", "accepted"); full != 1 || updates < 9 {
			t.Errorf("after 2.1 s: %d full registrations and %d load updates accepted, want 1 and at least 9", full, updates)
		}
		if r := f.h.do("DELETE", wire.RegistrationPath+"p1", nil, nil); r.status != 204 {
			t.Fatalf("DELETE: %d %s", r.status, r.body)
		}
		synctest.Wait()
		if r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","messages":[{"role":"user","content":"x"}]}`), nil); r.status != 404 {
			t.Fatalf("right after the DELETE: %d, want 404", r.status)
		}
		time.Sleep(300 * time.Millisecond) // the next heartbeat: refused, then the full registration
		synctest.Wait()
		if got := counter("load_updates_total", "unknown_backend"); got != 1 {
			t.Errorf("%d load updates refused as unknown_backend, want 1", got)
		}
		if got := counter("registrations_total", "accepted"); got != 2 {
			t.Errorf("%d full registrations, want 2 (the start and the fallback)", got)
		}
		if r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","messages":[{"role":"user","content":"x"}]}`), nil); r.status != 200 {
			t.Errorf("one heartbeat after the DELETE: %d %s, want the backend back", r.status, r.body)
		}
	})
}

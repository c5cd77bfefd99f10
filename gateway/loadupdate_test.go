package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// loadUpdate is the body of a load update of model m (generation gen, build b) with
// queue size q and q×10 KV tokens used, echoing dispatch seq seq.
func loadUpdate(m string, gen, b, q, seq uint64) []byte {
	l := idleLoad()
	l.QueueSize, l.KVCapacityTokens, l.KVUsedTokens, l.ObservedAtUnixMilli = q, 1000, q*10, time.Now().UnixMilli()
	return wire.AppendLoadUpdate(nil, &wire.LoadUpdate{DispatchSeq: seq, Models: []wire.LoadReport{{Model: m, Generation: gen, Build: b, DispatchSeq: seq, Load: l}}})
}

// registerForUpdates PUTs p1's registration (model m, generation 1, build 1, heartbeat
// hbMs, one capability) and returns the gateway's ack.
func registerForUpdates(t *testing.T, h *harness, hbMs uint64) wire.RegistrationAck {
	t.Helper()
	l := idleLoad()
	l.Capabilities = []string{"queue_size"}
	reg := wire.Registration{ID: "p1", URL: "http://p1:80", ClusterID: "c1", HeartbeatMs: hbMs, Models: map[string]wire.Model{
		"m": {Status: wire.StatusActive, Generation: 1, Build: 1, Stats: wire.StatsFromLoad(&l)},
	}}
	body, _ := json.Marshal(reg)
	r := h.do("PUT", wire.RegistrationPath+"p1", body, nil)
	var ack wire.RegistrationAck
	if r.status != 200 || json.Unmarshal([]byte(r.body), &ack) != nil {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	synctest.Wait()
	return ack
}

// modelState is p1's model m in /debug/state.
func modelState(t *testing.T, h *harness) (stats wire.Stats, seqEcho uint64) {
	t.Helper()
	var st struct {
		Backends []struct {
			ID     string `json:"id"`
			Models map[string]struct {
				Stats   wire.Stats `json:"stats"`
				SeqEcho uint64     `json:"dispatch_seq_echo"`
			} `json:"models"`
		} `json:"backends"`
	}
	if err := json.Unmarshal([]byte(h.do("GET", "/debug/state", nil, nil).body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Backends) != 1 || st.Backends[0].ID != "p1" {
		t.Fatalf("backends %+v, want p1 alone", st.Backends)
	}
	m := st.Backends[0].Models["m"]
	return m.Stats, m.SeqEcho
}

// The gateway says it takes load updates; each one (answered 204, no body) replaces the
// model's stats, keeps the registration's capabilities, echoes the dispatch seq and keeps
// the backend alive as a heartbeat does; once they stop, the backend expires after three
// missed heartbeats as before.
func TestLoadUpdatesRefreshStatsAndLiveness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MinExpiry: time.Millisecond}, "")
		h.pylon("p1", "c1", idleLoad(), nil)
		if ack := registerForUpdates(t, h, 100); !ack.LoadUpdates || ack.GatewayID != "gw-test" || ack.HeartbeatMs != 1000 {
			t.Errorf("ack %+v, want load_updates from gw-test", ack)
		}
		for i := range uint64(10) { // 900 ms: three heartbeats' expiry passed three times over
			time.Sleep(90 * time.Millisecond)
			r := h.do("PATCH", wire.RegistrationPath+"p1", loadUpdate("m", 1, 2+i, i, 40+i), map[string]string{"Content-Type": wire.LoadUpdateContentType})
			if r.status != 204 || r.body != "" {
				t.Fatalf("load update %d: %d %q, want 204 without a body", i, r.status, r.body)
			}
			synctest.Wait()
		}
		stats, seq := modelState(t, h)
		if stats.QueueSize != 9 || stats.KVCacheUsedTokens != 90 || stats.KVCacheCapacityTokens != 1000 || seq != 49 ||
			len(stats.StatsCapabilities) != 1 || stats.StatsCapabilities[0] != "queue_size" {
			t.Errorf("after the updates: %+v, seq echo %d; want queue 9, KV 90/1000, seq 49, the registration's capability", stats, seq)
		}
		if r := h.chat(nil); r.status != 200 {
			t.Fatalf("routed while updates keep it alive: %d %s", r.status, r.body)
		}
		time.Sleep(301 * time.Millisecond)
		synctest.Wait()
		if r := h.chat(nil); r.status != 404 {
			t.Errorf("three heartbeats after the last update: %d %s, want 404 (expired)", r.status, r.body)
		}
		if m := h.do("GET", "/metrics", nil, nil).body; !strings.Contains(m, `switchyard_load_updates_total{result="accepted"} 10`+"\n") {
			t.Errorf("metrics lack 10 accepted load updates:\n%s", grepLines(m, "load_updates"))
		}
	})
}

// A load update the gateway cannot apply is refused with a JSON error that makes the pylon
// send a full registration: 404 unknown_backend for a backend it does not know (after a
// restart, an expiry), 409 registration_required for a model or generation the
// registration does not list; a malformed body gets 400 naming the line and field, one
// over the admin body limit 413. None of them changes the backend.
func TestLoadUpdateRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MaxAdminBodyBytes: 64 << 10}, "")
		h.pylon("p1", "c1", idleLoad(), nil)
		if r := h.do("PATCH", wire.RegistrationPath+"p1", loadUpdate("m", 1, 2, 5, 1), nil); r.status != 404 || !strings.Contains(r.body, `"code":"unknown_backend"`) {
			t.Errorf("before any registration: %d %s, want 404 unknown_backend", r.status, r.body)
		}
		registerForUpdates(t, h, 60_000)
		for name, c := range map[string]struct {
			body   []byte
			status int
			want   string
		}{
			"another generation": {loadUpdate("m", 2, 2, 5, 1), 409, `"code":"registration_required"`},
			"an unlisted model":  {loadUpdate("n", 1, 2, 5, 1), 409, `"code":"registration_required"`},
			"version 2":          {[]byte("v=2;seq=1\n"), 400, "the version must be 1"},
			"a bad field":        {[]byte(strings.Replace(string(loadUpdate("m", 1, 2, 5, 1)), "kvu=50", "kvu=-50", 1)), 400, "line 2: field kvu"},
		} {
			r := h.do("PATCH", wire.RegistrationPath+"p1", c.body, nil)
			if r.status != c.status || !strings.Contains(r.body, c.want) || !strings.Contains(r.body, `"error":{`) {
				t.Errorf("%s: %d %s, want %d with %s", name, r.status, r.body, c.status, c.want)
			}
		}
		if r := h.do("PATCH", wire.RegistrationPath+"p2", loadUpdate("m", 1, 2, 5, 1), nil); r.status != 404 || !strings.Contains(r.body, "unknown_backend") {
			t.Errorf("another id: %d %s, want 404 unknown_backend", r.status, r.body)
		}
		if r := h.do("POST", wire.RegistrationPath+"p1", nil, nil); r.status != 405 || !strings.Contains(r.body, "PUT, PATCH or DELETE") {
			t.Errorf("POST: %d %s", r.status, r.body)
		}
		conn, err := h.adminLn.Dial()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PATCH %sp1 HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", wire.RegistrationPath, 70<<10)
		status, err := bufio.NewReader(conn).ReadString('\n')
		_ = conn.Close()
		if err != nil || !strings.Contains(status, " 413 ") {
			t.Errorf("a 70 KiB load update with a 64 KiB limit: %q %v, want 413", status, err)
		}
		if stats, _ := modelState(t, h); stats.QueueSize != 0 || stats.KVCacheUsedTokens != 0 {
			t.Errorf("a refused update changed the backend: %+v", stats)
		}
		m := h.do("GET", "/metrics", nil, nil).body
		for _, want := range []string{`result="unknown_backend"} 2`, `result="registration_required"} 2`, `result="invalid"} 2`, `result="accepted"} 0`} {
			if !strings.Contains(m, "switchyard_load_updates_total{"+want+"\n") {
				t.Errorf("metrics lack load_updates_total{%s:\n%s", want, grepLines(m, "load_updates"))
			}
		}
	})
}

// A load update needs what a registration needs: the control token, or the worker
// credential of its own backend id. Refused, it changes nothing.
func TestLoadUpdateAuth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers")
	if err := os.WriteFile(path, []byte("p1 tok-1\np2 tok-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{ControlToken: "ctl", WorkerCredentialsFile: path}, "")
		h.pylon("p1", "c1", idleLoad(), nil)
		l := idleLoad()
		body, _ := json.Marshal(wire.Registration{ID: "p1", URL: "http://p1:80", Models: map[string]wire.Model{"m": {Status: wire.StatusActive, Generation: 1, Stats: wire.StatsFromLoad(&l)}}})
		if r := h.do("PUT", wire.RegistrationPath+"p1", body, map[string]string{"Authorization": "Bearer tok-1"}); r.status != 200 {
			t.Fatalf("register: %d %s", r.status, r.body)
		}
		for _, c := range []struct {
			auth   string
			status int
		}{{"", 401}, {"Bearer wrong", 401}, {"Bearer tok-2", 401}, {"Bearer tok-1", 204}, {"Bearer ctl", 204}} {
			hdr := map[string]string{}
			if c.auth != "" {
				hdr["Authorization"] = c.auth
			}
			if r := h.do("PATCH", wire.RegistrationPath+"p1", loadUpdate("m", 1, 0, 3, 0), hdr); r.status != c.status {
				t.Errorf("%q: %d %s, want %d", c.auth, r.status, r.body, c.status)
			}
		}
		m := h.do("GET", "/metrics", nil, map[string]string{"Authorization": "Bearer ctl"}).body
		for _, want := range []string{`switchyard_load_updates_total{result="unauthorized"} 3`, `switchyard_load_updates_total{result="accepted"} 2`, `switchyard_registrations_total{result="unauthorized"} 0`} {
			if !strings.Contains(m, want+"\n") {
				t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "load_updates"))
			}
		}
	})
}

// A load update sent right after a registration that changed the model's generation is
// applied to the new generation only when it names it; the backend's load is never mixed
// across generations.
func TestLoadUpdateFollowsTheRegisteredGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		h.pylon("p1", "c1", idleLoad(), nil)
		registerForUpdates(t, h, 60_000)
		l := load.Load{InputTPS: 1000, MaxEngineConcurrency: 8}
		body, _ := json.Marshal(wire.Registration{ID: "p1", URL: "http://p1:80", ClusterID: "c1", Models: map[string]wire.Model{"m": {Status: wire.StatusActive, Generation: 2, Stats: wire.StatsFromLoad(&l)}}})
		if r := h.do("PUT", wire.RegistrationPath+"p1", body, nil); r.status != 200 {
			t.Fatal(r.body)
		}
		if r := h.do("PATCH", wire.RegistrationPath+"p1", loadUpdate("m", 1, 9, 7, 0), nil); r.status != 409 {
			t.Errorf("an update of the old generation: %d %s, want 409", r.status, r.body)
		}
		if r := h.do("PATCH", wire.RegistrationPath+"p1", loadUpdate("m", 2, 1, 4, 0), nil); r.status != 204 {
			t.Errorf("an update of the new generation: %d %s", r.status, r.body)
		}
		synctest.Wait()
		if stats, _ := modelState(t, h); stats.QueueSize != 4 {
			t.Errorf("queue size %d, want 4 (the new generation's update)", stats.QueueSize)
		}
	})
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

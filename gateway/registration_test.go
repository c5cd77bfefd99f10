package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// Registrations outside the limits get 400 with an OpenAI-style body naming the field;
// MaxModelsPerBackend sets the model limit and bodies over MaxAdminBodyBytes get 413.
func TestRegistrationLimitsAtTheGateway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{MaxModelsPerBackend: 3, MaxAdminBodyBytes: 64 << 10}, "")
		models := func(n int) map[string]wire.Model {
			m := map[string]wire.Model{}
			for i := range n {
				m[fmt.Sprintf("m%d", i)] = wire.Model{Status: wire.StatusActive}
			}
			return m
		}
		for _, c := range []struct {
			name  string
			reg   wire.Registration
			field string
		}{
			{"too many models", wire.Registration{ID: "p1", URL: "http://p1:80", Models: models(4)}, "models"},
			{"heartbeat too long", wire.Registration{ID: "p1", URL: "http://p1:80", HeartbeatMs: 1 << 62, Models: models(1)}, "heartbeat_ms"},
			{"negative throughput", wire.Registration{ID: "p1", URL: "http://p1:80", Models: map[string]wire.Model{
				"m": {Status: wire.StatusActive, Stats: wire.Stats{LastMeanInputTPS: -1e308}},
			}}, "last_mean_input_tps"},
		} {
			body, err := json.Marshal(c.reg)
			if err != nil {
				t.Fatal(err)
			}
			r := h.do("PUT", wire.RegistrationPath+"p1", body, nil)
			if r.status != 400 || !strings.Contains(r.body, c.field) || !strings.Contains(r.body, `"invalid_request"`) {
				t.Errorf("%s: %d %s, want 400 naming %s", c.name, r.status, r.body, c.field)
			}
		}
		// A 70 KiB registration with a 64 KiB limit: refused on its Content-Length.
		conn, err := h.adminLn.Dial()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PUT %sp1 HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", wire.RegistrationPath, 70<<10)
		status, err := bufio.NewReader(conn).ReadString('\n')
		_ = conn.Close()
		if err != nil || !strings.Contains(status, " 413 ") {
			t.Errorf("a 70 KiB registration with a 64 KiB limit: %q %v, want 413", status, err)
		}
		if st := h.do("GET", "/debug/state", nil, nil); strings.Contains(st.body, `"p1"`) {
			t.Errorf("a refused registration reached the fleet:\n%s", st.body)
		}
	})
}

// A target collected after its backend left is recreated when a backend registers again:
// requests route to it, not to the collected scheduler the gateway had cached.
func TestTargetCollectedThenReregistered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{TargetCollectGrace: 5 * time.Second}, "")
		p := h.pylon("p1", "c1", idleLoad(), nil)
		h.register(p)
		if r := h.chat(nil); r.status != 200 {
			t.Fatalf("first chat: %d %s", r.status, r.body)
		}
		if r := h.do("DELETE", wire.RegistrationPath+"p1", nil, nil); r.status != 204 {
			t.Fatalf("deregister: %d", r.status)
		}
		time.Sleep(10 * time.Second) // past the grace: the target is collected
		synctest.Wait()
		if m := h.do("GET", "/metrics", nil, nil).body; !strings.Contains(m, "switchyard_routing_targets 0\n") {
			t.Errorf("the target was not collected:\n%s", m)
		}
		h.register(p)
		for i := range 3 {
			if r := h.chat(nil); r.status != 200 || r.headers["X-Inference-Server-Id"] != "p1" {
				t.Fatalf("chat %d after re-registration: %d %s", i, r.status, r.body)
			}
		}
	})
}

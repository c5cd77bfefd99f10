package gateway_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/filestamp"
	"github.com/switchyard/switchyard/internal/wire"
)

// registration is a valid registration body for backend id at url.
func registration(t *testing.T, id, url string) []byte {
	t.Helper()
	l := idleLoad()
	b, err := json.Marshal(wire.Registration{
		ID: id, URL: url, HeartbeatMs: 1000,
		Models: map[string]wire.Model{"m": {Status: wire.StatusActive, Stats: wire.StatsFromLoad(&l)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// publicDo sends a request to the public listener whatever its path.
func (h *harness) publicDo(method, path string, body []byte) (int, string) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://gateway" + path)
	req.SetBody(body)
	if err := h.client.Do(req, resp); err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode(), string(resp.Body())
}

// The public listener serves nothing that changes routing or shows internals: control,
// debug and metrics requests there get 404, and no backend is registered or removed.
func TestPublicListenerHasNoControlPlane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{EnablePprof: true}, "")
		p := h.pylon("p1", "c1", idleLoad(), nil)
		h.register(p)
		for _, c := range []struct{ method, path string }{
			{"PUT", wire.RegistrationPath + "evil"},
			{"DELETE", wire.RegistrationPath + "p1"},
			{"GET", "/debug/state"},
			{"GET", "/debug/pprof/"},
			{"GET", "/metrics"},
		} {
			var body []byte
			if c.method == "PUT" {
				body = registration(t, "evil", "http://evil:80")
			}
			status, resp := h.publicDo(c.method, c.path, body)
			if status != 404 || !strings.Contains(resp, `"not_found"`) {
				t.Errorf("public %s %s: %d %s, want 404", c.method, c.path, status, resp)
			}
		}
		synctest.Wait()
		for range 5 {
			if r := h.chat(nil); r.status != 200 || r.headers["X-Inference-Server-Id"] != "p1" {
				t.Fatalf("after the public control attempts: %d %s %v", r.status, r.body, r.headers)
			}
		}
		if st := h.do("GET", "/debug/state", nil, nil); strings.Contains(st.body, "evil") {
			t.Errorf("a public PUT registered a backend:\n%s", st.body)
		}
		if status, _ := h.publicDo("GET", "/readyz", nil); status != 200 {
			t.Errorf("public /readyz with a routable backend: %d", status)
		}
	})
}

// PublicMetrics also serves /metrics on the public listener.
func TestPublicMetricsFlag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{PublicMetrics: true}, "")
		if status, body := h.publicDo("GET", "/metrics", nil); status != 200 || !strings.Contains(body, "go_goroutines") {
			t.Errorf("public /metrics with PublicMetrics: %d", status)
		}
	})
}

// With no token configured and the admin listener on loopback (development mode), the
// admin endpoints work without credentials.
func TestAdminWithoutTokenOnLoopback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		if r := h.do("PUT", wire.RegistrationPath+"p1", registration(t, "p1", "http://p1:80"), nil); r.status != 200 {
			t.Errorf("PUT without a token: %d %s", r.status, r.body)
		}
		if r := h.do("DELETE", wire.RegistrationPath+"p1", nil, nil); r.status != 204 {
			t.Errorf("DELETE without a token: %d %s", r.status, r.body)
		}
		if r := h.do("GET", "/debug/state", nil, nil); r.status != 200 {
			t.Errorf("/debug/state without a token: %d", r.status)
		}
	})
}

// With a token every admin path needs it: missing or wrong → 401 with a JSON body and a
// WWW-Authenticate challenge, right → served; /metrics is exempt only with MetricsNoAuth.
func TestAdminTokenRequired(t *testing.T) {
	for _, metricsNoAuth := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, gateway.Config{ControlToken: "s3cret", EnablePprof: true, MetricsNoAuth: metricsNoAuth}, "")
			reg := registration(t, "p1", "http://p1:80")
			for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret2", "s3cret", "Basic s3cret"} {
				hdr := map[string]string{}
				if auth != "" {
					hdr["Authorization"] = auth
				}
				for _, c := range []struct {
					method, path string
					body         []byte
				}{
					{"PUT", wire.RegistrationPath + "p1", reg},
					{"DELETE", wire.RegistrationPath + "p1", nil},
					{"GET", "/debug/state", nil},
					{"GET", "/debug/pprof/", nil},
					{"GET", "/metrics", nil},
				} {
					r := h.do(c.method, c.path, c.body, hdr)
					if c.path == "/metrics" && metricsNoAuth {
						if r.status != 200 {
							t.Errorf("/metrics with MetricsNoAuth, auth %q: %d", auth, r.status)
						}
						continue
					}
					if r.status != 401 || !strings.Contains(r.body, `"unauthorized"`) || !strings.HasPrefix(r.headers["Www-Authenticate"], "Bearer") {
						t.Errorf("%s %s with auth %q: %d %s %v, want 401", c.method, c.path, auth, r.status, r.body, r.headers)
					}
				}
			}
			ok := map[string]string{"Authorization": "Bearer s3cret"}
			if r := h.do("PUT", wire.RegistrationPath+"p1", reg, ok); r.status != 200 {
				t.Errorf("PUT with the token: %d %s", r.status, r.body)
			}
			if r := h.do("GET", "/debug/state", nil, ok); r.status != 200 || !strings.Contains(r.body, `"p1"`) {
				t.Errorf("/debug/state with the token: %d", r.status)
			}
			if r := h.do("GET", "/metrics", nil, ok); r.status != 200 || !strings.Contains(r.body, "switchyard_admin_unauthorized_total") {
				t.Errorf("/metrics with the token: %d (or the refusals are not counted)", r.status)
			}
			if r := h.do("DELETE", wire.RegistrationPath+"p1", nil, ok); r.status != 204 {
				t.Errorf("DELETE with the token: %d %s", r.status, r.body)
			}
		})
	}
}

// A token file is re-read when it changes: within a second the new token is accepted and
// the old one refused.
func TestAdminTokenFileRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{ControlTokenFile: path}, "")
		get := func(token string) int {
			return h.do("GET", "/debug/state", nil, map[string]string{"Authorization": "Bearer " + token}).status
		}
		if got := get("first"); got != 200 {
			t.Fatalf("first token: %d", got)
		}
		if err := os.WriteFile(path, []byte("second\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(path, later, later); err != nil {
			t.Fatal(err)
		}
		time.Sleep(filestamp.DefaultInterval) // the file is looked at once per interval (virtual time here)
		if got := get("second"); got != 200 {
			t.Errorf("rotated token: %d", got)
		}
		if got := get("first"); got != 401 {
			t.Errorf("old token after rotation: %d, want 401", got)
		}
	})
}

// A gateway whose admin listener is reachable from other hosts refuses to start without a
// token, naming the two ways out; either way out lets it start.
func TestNonLoopbackAdminNeedsToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8001", ":8001", "10.1.2.3:8001", "[::]:8001", "example.com:8001"} {
		_, err := gateway.New(gateway.Config{AdminListenAddr: addr}, gateway.Deps{})
		if err == nil || !strings.Contains(err.Error(), "--control-token-file") || !strings.Contains(err.Error(), "--insecure-no-control-auth") {
			t.Errorf("admin %s without a token: %v", addr, err)
		}
	}
	for _, cfg := range []gateway.Config{
		{AdminListenAddr: "0.0.0.0:8001", ControlToken: "t"},
		{AdminListenAddr: "0.0.0.0:8001", InsecureNoControlAuth: true},
		{AdminListenAddr: "127.0.0.1:8001"},
		{AdminListenAddr: "[::1]:8001"},
		{AdminListenAddr: "localhost:8001"},
	} {
		g, err := gateway.New(cfg, gateway.Deps{})
		if err != nil {
			t.Errorf("%+v: %v", cfg, err)
			continue
		}
		g.Close()
	}
}

// Half-configured security settings fail at start with the flag named.
func TestSecurityConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cfg  gateway.Config
		want string
	}{
		{gateway.Config{ControlToken: "a", ControlTokenFile: filepath.Join(dir, "t")}, "--control-token"},
		{gateway.Config{ControlTokenFile: filepath.Join(dir, "missing")}, "missing"},
		{gateway.Config{AdminClientCAFile: filepath.Join(dir, "ca.pem")}, "--tls-cert-file"},
	} {
		if _, err := gateway.New(c.cfg, gateway.Deps{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}

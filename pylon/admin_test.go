package pylon_test

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/pylon"
)

// /metrics, /healthz and /readyz are served on the admin listener only: on the data
// listener a GET /metrics is an ordinary (here malformed) relayed request, never the
// pylon's metrics.
func TestHermeticAdminListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames = []string{"dummy-model"}
		h := newHermetic(t, cfg, mock.Config{})
		defer h.close()
		for path, want := range map[string]string{"/metrics": "pylon_", "/healthz": `"ok"`, "/readyz": `"ready"`} {
			status, body, err := h.admin.Get(nil, "http://pylon-admin"+path)
			if err != nil || status != 200 || !strings.Contains(string(body), want) {
				t.Errorf("admin %s: %v %d %.100s", path, err, status, body)
			}
		}
		if status, _, err := h.admin.Get(nil, "http://pylon-admin/v1/models"); err != nil || status != 404 {
			t.Errorf("admin /v1/models: %v %d, want 404", err, status)
		}
		status, body, err := h.client.Get(nil, "http://pylon/metrics")
		if err != nil || status == 200 || strings.Contains(string(body), "pylon_") {
			t.Errorf("data /metrics: %v %d %.100s, want no metrics there", err, status, body)
		}
	})
}

// --enable-pprof serves Go's profiles on the admin listener, and only there; without it
// /debug/pprof/ is not found.
func TestHermeticAdminPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			cfg := pylon.DefaultConfig()
			cfg.ModelNames, cfg.EnablePprof = []string{"dummy-model"}, on
			h := newHermetic(t, cfg, mock.Config{})
			defer h.close()
			status, body, err := h.admin.Get(nil, "http://pylon-admin/debug/pprof/goroutine?debug=1")
			if err != nil {
				t.Fatal(err)
			}
			if got := status == 200 && strings.Contains(string(body), "goroutine profile"); got != on {
				t.Errorf("pprof %v: admin /debug/pprof/goroutine %d %.80s", on, status, body)
			}
			if status, body, err := h.client.Get(nil, "http://pylon/debug/pprof/goroutine?debug=1"); err != nil || strings.Contains(string(body), "goroutine profile") {
				t.Errorf("pprof %v: the data listener served a profile: %v %d", on, err, status)
			}
		})
	}
}

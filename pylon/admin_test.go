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

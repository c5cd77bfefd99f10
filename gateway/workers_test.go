package gateway_test

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/filestamp"
	"github.com/switchyard/switchyard/internal/wire"
)

// Worker credentials: a pylon registers with the token listed for its id (not another
// pylon's), the control token still admits any registration, a worker token opens no
// other admin path, and a rewritten file takes effect without a restart.
func TestWorkerCredentialsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers")
	if err := os.WriteFile(path, []byte("p1 tok-1\np2 tok-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{ControlToken: "ctl", WorkerCredentialsFile: path}, "")
		reg := func(id, token string) int {
			t.Helper()
			body := `{"inference_server_id":"` + id + `","inference_server_url":"http://` + id + `:80","models":{"m":{"status":"ACTIVE","stats":{}}}}`
			return h.do("PUT", wire.RegistrationPath+id, []byte(body), map[string]string{"Authorization": "Bearer " + token}).status
		}
		if s := reg("p1", "tok-1"); s != 200 {
			t.Errorf("p1 with its own token: %d", s)
		}
		if s := reg("p1", "tok-2"); s != 401 {
			t.Errorf("p1 with p2's token: %d, want 401", s)
		}
		if s := reg("p3", "ctl"); s != 200 {
			t.Errorf("p3 with the control token: %d", s)
		}
		if r := h.do("GET", "/debug/state", nil, map[string]string{"Authorization": "Bearer tok-1"}); r.status != 401 {
			t.Errorf("/debug/state with a worker token: %d, want 401", r.status)
		}
		if r := h.do("DELETE", wire.RegistrationPath+"p1", nil, map[string]string{"Authorization": "Bearer tok-1"}); r.status != 204 {
			t.Errorf("p1 deregistering with its token: %d", r.status)
		}
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte("p1 tok-1b\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // a new inode: seen as changed
			t.Fatal(err)
		}
		time.Sleep(filestamp.DefaultInterval) // the file is looked at once per interval (virtual time here)
		if s := reg("p1", "tok-1"); s != 401 {
			t.Errorf("p1 with its rotated-away token: %d, want 401", s)
		}
		if s := reg("p1", "tok-1b"); s != 200 {
			t.Errorf("p1 with its new token: %d", s)
		}
	})
}

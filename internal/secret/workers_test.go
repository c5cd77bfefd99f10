package secret_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/switchyard/switchyard/internal/secret"
)

// Worker credentials: a token admits the id it is listed for (or any id under "*"), is
// re-read when the file changes, and an unusable new file keeps the last good credentials.
func TestWorkers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "workers")
		if err := os.WriteFile(path, []byte("# pylons\npylon-a tok-a\npylon-a tok-a2\n\n* tok-any\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := secret.NewWorkers(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		check := func(what, id, auth string, want bool) {
			t.Helper()
			if got := w.Check(id, []byte(auth)); got != want {
				t.Errorf("%s: Check(%q, %q) = %v, want %v", what, id, auth, got, want)
			}
		}
		check("own token", "pylon-a", "Bearer tok-a", true)
		check("second token of the id", "pylon-a", "bearer tok-a2", true)
		check("another pylon's token", "pylon-b", "Bearer tok-a", false)
		check("any-pylon token", "pylon-b", "Bearer tok-any", true)
		check("no scheme", "pylon-a", "tok-a", false)
		check("prefix of a token", "pylon-a", "Bearer tok-", false)

		replace(t, path, "pylon-b tok-b\n")
		settle()
		check("rotated away", "pylon-a", "Bearer tok-a", false)
		check("rotated in", "pylon-b", "Bearer tok-b", true)
		replace(t, path, "pylon-c\n")
		settle()
		check("invalid new file keeps the last good", "pylon-b", "Bearer tok-b", true)

		var none *secret.Workers
		if none.Configured() || none.Check("x", []byte("Bearer x")) {
			t.Error("a nil Workers admits")
		}
		if w, err := secret.NewWorkers("", nil); w != nil || err != nil {
			t.Errorf("no file: %v, %v", w, err)
		}
	})
}

// Files that can never admit anyone are refused at start, naming the flag.
func TestWorkersInvalidFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, data := range map[string]string{"empty": "# nothing\n", "one field": "pylon-a\n", "three fields": "a b c\n"} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := secret.NewWorkers(path, nil); err == nil || !strings.Contains(err.Error(), "--worker-credentials-file") {
			t.Errorf("%s: %v, want an error naming --worker-credentials-file", name, err)
		}
	}
	if _, err := secret.NewWorkers(filepath.Join(dir, "missing"), nil); err == nil {
		t.Error("missing file accepted")
	}
}

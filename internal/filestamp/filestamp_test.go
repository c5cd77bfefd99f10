package filestamp_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/filestamp"
)

func TestOf(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if filestamp.Of("") != (filestamp.Stamp{}) {
		t.Error("empty path: want the zero stamp")
	}
	missing := filestamp.Of(path)
	if missing == (filestamp.Stamp{}) {
		t.Error("missing file: want a stamp unlike the zero one")
	}
	if err := os.WriteFile(path, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := filestamp.Of(path)
	if first == missing {
		t.Error("created file: stamp did not change")
	}
	if filestamp.Of(path) != first {
		t.Error("unchanged file: stamp changed")
	}
	if err := os.WriteFile(path, []byte("bb"), 0o600); err != nil {
		t.Fatal(err)
	}
	if filestamp.Of(path) == first {
		t.Error("rewritten file (new size): stamp did not change")
	}
	second := filestamp.Of(path)
	old := time.Unix(1, 0)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if filestamp.Of(path) == second {
		t.Error("touched file (new mtime): stamp did not change")
	}
}

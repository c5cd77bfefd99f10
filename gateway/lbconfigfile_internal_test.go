package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// The lb-config file decodes as lbconfig.Parse decodes its bytes; a bad or missing file's
// error names the path and keeps the cause.
func TestLoadLBConfig(t *testing.T) {
	t.Parallel()
	const doc = `{"default":"wait-and-widen","models":{"m":{"algorithm":"power-of-n","sample_count":3}}}`
	dir := t.TempDir()
	good := filepath.Join(dir, "lb-config.json")
	if err := os.WriteFile(good, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadLBConfig(good)
	if err != nil {
		t.Fatalf("loadLBConfig: %v", err)
	}
	want, err := lbconfig.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("loadLBConfig differs from Parse (-want +got):\n%s", diff)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"default":"sticky"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = loadLBConfig(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `"sticky"`) ||
		!errors.Is(err, lbconfig.ErrUnknownAlgorithm) {
		t.Errorf("loadLBConfig(bad) error = %v, want the path, the name and ErrUnknownAlgorithm", err)
	}

	missing := filepath.Join(dir, "missing.json")
	_, err = loadLBConfig(missing)
	if err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("loadLBConfig(missing) error = %v, want the path and os.ErrNotExist", err)
	}
}

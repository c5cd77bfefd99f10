package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListScenarios(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := listScenarios(&b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != 19 || !strings.Contains(b.String(), "demo ") {
		t.Errorf("%d lines:\n%s", n, b.String())
	}
}

func TestLoadScenarioErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nmodel: m\ncolour: blue\nrequest_count: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadScenario(bad)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `unknown field "colour"`) {
		t.Errorf("error %q", err)
	}
	if _, err := loadScenario("demo"); err != nil {
		t.Errorf("bundled demo: %v", err)
	}
	if _, err := loadScenario("no-such-scenario"); err == nil {
		t.Error("missing scenario accepted")
	}
}

// Package cmdlinetest helps the binaries' tests check the example config files in the
// documentation.
package cmdlinetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DocExample finds the fenced block that follows the line "<!-- example: NAME -->" in
// the markdown file doc, writes its text to a file in a test directory (named after its
// language, .yaml or .json) and returns the file's path. It fails the test when there
// is no such block.
func DocExample(t *testing.T, doc, name string) string {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- example: "+name+" -->\n```")
	if !ok {
		t.Fatalf("%s has no example %q", doc, name)
	}
	lang, rest, _ := strings.Cut(rest, "\n")
	body, _, ok := strings.Cut(rest, "\n```")
	if !ok || (lang != "yaml" && lang != "json") {
		t.Fatalf("%s: example %q is not a closed yaml or json block", doc, name)
	}
	path := filepath.Join(t.TempDir(), name+"."+lang)
	if err := os.WriteFile(path, []byte(body+"\n"), 0o600); err != nil { //nolint:gosec // name is the calling test's constant, lang is yaml or json
		t.Fatal(err)
	}
	return path
}

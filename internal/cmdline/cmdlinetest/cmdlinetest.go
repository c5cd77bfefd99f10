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

// WriteConfig writes body to a file called name in a test directory and returns its path.
func WriteConfig(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// RawSocketIO checks the --[no-]raw-socket-io switch of a binary: on by default, off by
// the flag, by the environment variable env ("false") and by a config file (fileName,
// with raw_socket_io: false), and the flag beats the file. plain parses the arguments
// and reports whether plain fasthttp I/O was chosen.
func RawSocketIO(t *testing.T, env, fileName string, plain func(args ...string) (bool, error)) {
	t.Helper()
	file := WriteConfig(t, fileName, "raw_socket_io: false\n")
	for _, tc := range []struct {
		name  string
		args  []string
		env   string
		plain bool
	}{
		{"default", nil, "", false},
		{"flag", []string{"--no-raw-socket-io"}, "", true},
		{"env", nil, "false", true},
		{"file", []string{"--config", file}, "", true},
		{"flag beats file", []string{"--config", file, "--raw-socket-io"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(env, tc.env)
			}
			got, err := plain(tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.plain {
				t.Errorf("plain socket I/O = %v, want %v", got, tc.plain)
			}
		})
	}
}

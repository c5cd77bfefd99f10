// Package scenarios embeds the bundled scenario files (demo.yaml and the reference
// catalogue) so the bench can list and load them by name from any directory.
package scenarios

import (
	"embed"
	"io/fs"
	"path"
	"slices"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Names returns the bundled scenario names (file names without .yaml), sorted.
func Names() []string {
	entries, err := fs.Glob(files, "*.yaml")
	if err != nil { // not reachable: the pattern is valid
		return nil
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e, ".yaml"))
	}
	slices.Sort(out)
	return out
}

// Read returns the bundled scenario called name (with or without .yaml).
func Read(name string) ([]byte, error) {
	return files.ReadFile(path.Base(strings.TrimSuffix(name, ".yaml")) + ".yaml")
}

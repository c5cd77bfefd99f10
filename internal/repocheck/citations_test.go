package repocheck_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// forbidden are the marks of a citation of a document outside the repository: the design
// notes the project was planned with, their folder beside the repository, and the section
// sign their citations use. They are spelt in pieces so that this file does not match.
var forbidden = []string{
	"REFERENCE" + ".md",
	"DESIGN" + ".md",
	"LIBRARIES" + ".md",
	"STYLE" + ".md",
	".." + "/shared",
	"\u00a7",
}

// topLevelSkipped are the repository root's folders that hold no sources of its own: built
// binaries and bench output (both ignored by git). Hidden folders (.git, the installed
// tools in .bin) and npm's node_modules are skipped wherever they are.
var topLevelSkipped = map[string]bool{"bin": true, "out": true}

// TestNoCitationsOfOutsideDocuments fails, naming file:line, for every Go file and every
// Markdown file (README.md, docs/ and the rest) that cites a document outside the
// repository. Comments and docs must say what they mean in their own words, or point to a
// page under docs/.
func TestNoCitationsOfOutsideDocuments(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	checked := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			switch {
			case path == root:
				return nil
			case strings.HasPrefix(name, "."), name == "node_modules",
				topLevelSkipped[name] && filepath.Dir(path) == root:
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(name)
		if (ext != ".go" && ext != ".md") || !d.Type().IsRegular() {
			return nil
		}
		checked[ext]++
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return checkFile(t, path, filepath.ToSlash(rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk must have seen the repository, not an empty folder.
	if checked[".go"] < 100 || checked[".md"] < 10 {
		t.Errorf("checked only %d Go and %d Markdown files", checked[".go"], checked[".md"])
	}
	for _, must := range []string{"README.md", "docs/routing.md"} {
		if _, err := os.Stat(filepath.Join(root, must)); err != nil {
			t.Errorf("%s not found: %v", must, err)
		}
	}
}

// checkFile reports every line of path that holds a forbidden mark, as rel:line.
func checkFile(t *testing.T, path, rel string) error {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		for _, mark := range forbidden {
			if strings.Contains(line, mark) {
				t.Errorf("%s:%d cites a document outside the repository (%q): %s", rel, n, mark, strings.TrimSpace(line))
			}
		}
	}
	return sc.Err()
}

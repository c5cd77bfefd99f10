package chartcheck

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The binaries whose flags the chart writes, built from this repository's cmd/.
var binaries = []string{"gateway", "pylon", "engine"}

// Flag names in --help: "  -h, --help", "      --http-listen-addr=...", "      --[no-]queue-admission".
var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-[A-Za-z], )?--(\[no-\])?([a-z0-9][a-z0-9-]*)`)

// binaryFlags builds gateway, pylon and engine and returns the flags each one's --help
// lists.
func binaryFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	dir := t.TempDir()
	pkgs := make([]string, 0, len(binaries))
	for _, b := range binaries {
		pkgs = append(pkgs, "./cmd/"+b)
	}
	build := exec.CommandContext(t.Context(), "go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", pkgs, err, out)
	}
	flags := map[string]map[string]bool{}
	for _, b := range binaries {
		out, err := exec.CommandContext(t.Context(), filepath.Join(dir, b), "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", b, err)
		}
		flags[b] = map[string]bool{}
		for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
			flags[b][m[2]] = true
			if m[1] != "" {
				flags[b]["no-"+m[2]] = true
			}
		}
		if len(flags[b]) < 10 {
			t.Fatalf("%s --help lists %d flags; the pattern no longer fits:\n%s", b, len(flags[b]), out)
		}
	}
	return flags
}

// Every argument the chart gives gateway, pylon or engine is a flag the binary knows, in
// every values case, and each binary is run by some container.
func TestFlagsExist(t *testing.T) {
	t.Parallel()
	known := binaryFlags(t)
	ran := map[string]bool{}
	for _, vc := range valuesCases {
		for _, d := range render(t, vc).deployments {
			for _, c := range d.Spec.Template.Spec.Containers {
				if len(c.Command) != 1 || known[c.Command[0]] == nil {
					continue
				}
				bin := c.Command[0]
				ran[bin] = true
				for _, a := range c.Args {
					name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
					if !strings.HasPrefix(a, "--") || !known[bin][name] {
						t.Errorf("%s: Deployment %s gives %s %q, which is not one of its flags", vc.name, d.Name, bin, a)
					}
				}
			}
		}
	}
	for _, b := range binaries {
		if !ran[b] {
			t.Errorf("no container runs %s", b)
		}
	}
}

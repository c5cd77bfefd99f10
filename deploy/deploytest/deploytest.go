// Package deploytest reads the Kubernetes manifests in deploy/ for tests: each binary's
// tests parse the container arguments the manifests give it, so a renamed or removed flag
// breaks the build instead of a deployment.
package deploytest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Kubernetes' $(VAR) references in arguments, replaced by sample values.
var samples = strings.NewReplacer("$(POD_IP)", "10.1.2.3", "$(POD_NAME)", "switchyard-engine-0")

type manifest struct {
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name    string   `yaml:"name"`
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// Args returns the argument lists of every container in deploy/*.yaml whose command is
// binary; it fails the test when there is none.
func Args(t *testing.T, binary string) [][]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	files, err := filepath.Glob(filepath.Join(filepath.Dir(file), "..", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/: %v", err)
	}
	var out [][]string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var m manifest
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, c := range m.Spec.Template.Spec.Containers {
				if len(c.Command) == 1 && c.Command[0] == binary {
					args := make([]string, len(c.Args))
					for i, a := range c.Args {
						args[i] = samples.Replace(a)
					}
					out = append(out, args)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no container runs %s in deploy/*.yaml", binary)
	}
	return out
}

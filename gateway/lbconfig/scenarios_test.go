package lbconfig

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite golden files")

// referenceScenarios is the folder of bundled bench scenarios: the reference bench's 17,
// unchanged, and demo.yaml, which is ours.
const referenceScenarios = "../../bench/scenarios"

const scenarioConfigs = "testdata/scenario-configs"

// TestScenarioConfigs checks that every algorithm config of the reference bench scenarios
// loads, from the copies in testdata. The golden file records what each decodes to.
func TestScenarioConfigs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(scenarioConfigs, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario configs in %s (err %v)", scenarioConfigs, err)
	}
	var b strings.Builder
	for _, f := range files {
		c, err := loadFile(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		fmt.Fprintf(&b, "%s: default=%s", filepath.Base(f), c.Default.Name)
		models := make([]string, 0, len(c.Models))
		for id := range c.Models {
			models = append(models, id)
		}
		slices.Sort(models)
		for _, id := range models {
			fmt.Fprintf(&b, " %s=%s", id, summary(c.Models[id].Entry))
		}
		b.WriteString("\n")
	}
	golden := filepath.Join("testdata", "scenario-configs.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("decoded scenario configs (-want +got):\n%s", diff)
	}
}

// summary prints the settings of e that the scenario configs set.
func summary(e Entry) string {
	s := fmt.Sprintf("%s{seed=%q affinity_key=%t input_tokens=%t", e.Name, e.Seed, e.RequireCacheAffinityKey, e.RequireInputTokens)
	if e.Algorithm.hasWAWSettings() {
		s += fmt.Sprintf(" selection=%d queue_slo=%t floor=%v ceil=%v", e.SelectionCount, e.HasQueueSLO, e.QueueFloor, e.QueueCeil)
	}
	if e.Algorithm.isPulsar() {
		s += fmt.Sprintf(" kv=%t", e.ConsiderKVFreeTokens)
	}
	return s + "}"
}

// TestReferenceScenarioYAML decodes every algorithms[].config of the reference scenarios
// bundled in bench/scenarios and checks that testdata holds a copy of each, so the copies
// cannot drift.
func TestReferenceScenarioYAML(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(referenceScenarios, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenarios in %s", referenceScenarios)
	}
	copies := loadCopies(t)
	checked := 0
	for _, f := range files {
		if filepath.Base(f) == "demo.yaml" { // ours, not the reference's
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var scenario struct {
			Algorithms []struct {
				Name   string         `yaml:"name"`
				Config map[string]any `yaml:"config"`
			} `yaml:"algorithms"`
		}
		if err := yaml.Unmarshal(data, &scenario); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, a := range scenario.Algorithms {
			where := filepath.Base(f) + " " + a.Name
			doc, err := json.Marshal(a.Config)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			c, err := Parse(doc)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if err := c.Validate(); err != nil {
				t.Errorf("%s: %v", where, err)
			}
			var generic any
			if err := json.Unmarshal(doc, &generic); err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(copies, func(c any) bool { return reflect.DeepEqual(c, generic) }) {
				t.Errorf("%s: config %s has no copy in %s", where, doc, scenarioConfigs)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Errorf("no algorithm configs found in %s", referenceScenarios)
	}
}

func loadCopies(t *testing.T) []any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(scenarioConfigs, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	copies := make([]any, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		copies = append(copies, v)
	}
	return copies
}

// loadFile reads and parses the lb-config file at path (the package does no file I/O).
func loadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

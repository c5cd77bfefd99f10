package deploytest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"go.yaml.in/yaml/v3"
)

// Promtool returns the path of Prometheus' promtool, or skips the test, naming the missing
// binary and the package that has it (.ci/run installs it).
func Promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("SKIPPED: promtool is not on PATH; install Debian's prometheus package (apt-get install prometheus) to check the metrics and alert rules")
	}
	return p
}

// CheckMetrics runs `promtool check metrics` on one scrape and returns what it reports
// (nil when the scrape is clean).
func CheckMetrics(t *testing.T, promtool, scrape string) []string {
	t.Helper()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	var problems []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			problems = append(problems, l)
		}
	}
	if err != nil && len(problems) == 0 {
		problems = append(problems, "promtool: "+err.Error())
	}
	return problems
}

// Families returns the metric families of a scrape, parsed as Prometheus does (a
// histogram is one family, without its _bucket, _sum and _count series).
func Families(t *testing.T, scrape string) map[string]bool {
	t.Helper()
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	out := make(map[string]bool, len(mfs))
	for name := range mfs {
		out[name] = true
	}
	return out
}

// Dir returns the path of deploy/.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

// AlertRulesFile is the Prometheus rules file, relative to deploy/.
const AlertRulesFile = "prometheus/alerts.yaml"

// QueriedMetrics returns the metric families (with their prefix, without the
// _bucket/_sum/_count suffixes of histograms) that the Grafana dashboard and the alert rules
// query under any of the prefixes, each with the files that use it.
func QueriedMetrics(t *testing.T, prefixes ...string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(Dir(), "grafana", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboard in deploy/grafana: %v", err)
	}
	files = append(files, filepath.Join(Dir(), AlertRulesFile))
	alt := make([]string, len(prefixes))
	for i, p := range prefixes {
		alt[i] = regexp.QuoteMeta(p)
	}
	re := regexp.MustCompile(`\b(?:` + strings.Join(alt, "|") + `)[a-zA-Z0-9_]+`)
	out := map[string][]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if strings.HasSuffix(f, ".json") {
			err = json.Unmarshal(data, &doc)
		} else {
			err = yaml.Unmarshal(data, &doc)
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		rel, _ := filepath.Rel(filepath.Join(Dir(), ".."), f)
		for _, expr := range exprs(doc) {
			for _, m := range re.FindAllString(expr, -1) {
				name := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					name = strings.TrimSuffix(name, suffix)
				}
				if !slices.Contains(out[name], rel) {
					out[name] = append(out[name], rel)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("the dashboard and alert rules query no metric under %v", prefixes)
	}
	return out
}

// exprs returns every "expr" string in a decoded JSON or YAML document (the dashboard's
// panel targets, the rules' expressions).
func exprs(doc any) []string {
	var out []string
	switch v := doc.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				out = append(out, s)
			} else {
				out = append(out, exprs(x)...)
			}
		}
	case []any:
		for _, x := range v {
			out = append(out, exprs(x)...)
		}
	}
	return out
}

// Sorted returns the keys of m in order.
func Sorted[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

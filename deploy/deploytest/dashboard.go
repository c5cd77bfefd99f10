package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// DashboardMetrics returns the metric families (without prefix and without the
// _bucket/_sum/_count suffixes) that deploy/grafana/switchyard.json queries under prefix.
func DashboardMetrics(t *testing.T, prefix string) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "grafana", "switchyard.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range regexp.MustCompile(`\b`+regexp.QuoteMeta(prefix)+`[a-z_]+`).FindAllString(string(data), -1) {
		name := strings.TrimPrefix(m, prefix)
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, suffix)
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		t.Fatalf("the dashboard queries no %s metric", prefix)
	}
	return out
}

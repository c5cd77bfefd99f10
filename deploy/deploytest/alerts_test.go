package deploytest_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/switchyard/switchyard/deploy/deploytest"
)

// The alert rules in deploy/prometheus pass `promtool check rules`, and their unit tests
// (alerts_test.yaml: each alert fires on the series that should raise it, and only then)
// pass `promtool test rules`.
func TestAlertRules(t *testing.T) {
	promtool := deploytest.Promtool(t)
	dir := filepath.Join(deploytest.Dir(), "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

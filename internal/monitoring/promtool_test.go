//go:build envtest

package monitoring

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// TestPromtool runs promtool check rules and promtool test rules (Debian package prometheus,
// listed in scripts/apt-packages.txt). A missing promtool is a failure, not a skip: the alert
// tests are the proof that every alert fires and stays silent when it should.
func TestPromtool(t *testing.T) {
	promtool := prereq.Command(t, "promtool", "envtest")
	root := prereq.RepoRoot(t)
	tests, err := filepath.Glob(filepath.Join(root, "dashboards", "prometheus", "tests", "*.test.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool tests under dashboards/prometheus/tests (%v)", err)
	}
	for _, args := range [][]string{
		{"check", "rules", RulesPath},
		append([]string{"test", "rules"}, relativeTo(t, root, tests)...),
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

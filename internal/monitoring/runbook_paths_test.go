package monitoring

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// runbookPath matches a runbook page or folder named in code ("runbooks/upgrade/migrate.md",
// "runbooks/upgrade/"); templates such as runbooks/alerts/<name>.md do not match.
var runbookPath = regexp.MustCompile(`runbooks/[A-Za-z0-9_./-]*[A-Za-z0-9_/-]`)

// TestEveryRunbookPathInTheCodeExists: every runbook page or folder that the code prints (in
// refusals, error messages and help) exists, so on-call is never sent to a missing page.
func TestEveryRunbookPathInTheCodeExists(t *testing.T) {
	root := prereq.RepoRoot(t)
	paths := map[string]bool{}
	for _, m := range runbookPath.FindAllString(projectGoSource(t), -1) {
		paths[strings.TrimSuffix(m, ".")] = true
	}
	if len(paths) < 3 {
		t.Fatalf("found only %d runbook paths in the code: the pattern no longer matches how the code names them", len(paths))
	}
	for p := range paths {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("the code names %s, which does not exist", p)
		}
	}
}

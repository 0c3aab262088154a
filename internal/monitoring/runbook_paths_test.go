package monitoring

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// runbookPath matches a runbook page or folder named in code ("runbooks/upgrade/migrate.md",
// "runbooks/upgrade/"), with its #anchor if any; templates such as runbooks/alerts/<name>.md
// do not match.
var runbookPath = regexp.MustCompile(`runbooks/[A-Za-z0-9_./-]*[A-Za-z0-9_/-](#[a-z0-9-]+)?`)

// TestEveryRunbookPathInTheCodeExists: every runbook page, folder or section that the code
// prints (in refusals, error messages and help), the chart renders (the stage guard's
// messages) or the upgrade engine composes (a page per stage, the index) exists, so on-call is
// never sent to a missing page.
func TestEveryRunbookPathInTheCodeExists(t *testing.T) {
	root := prereq.RepoRoot(t)
	paths := map[string]bool{}
	sources := projectGoSource(t) + chartSource(t, root)
	for _, m := range runbookPath.FindAllString(sources, -1) {
		paths[strings.TrimSuffix(m, ".")] = true
	}
	if len(paths) < 3 {
		t.Fatalf("found only %d runbook paths in the code: the pattern no longer matches how the code names them", len(paths))
	}
	cfg := upgrade.WidgetConfig()
	paths[cfg.RunbookDir+"/README.md#inconsistent"] = true
	for _, s := range crd.Stages {
		paths[cfg.Runbook(s)] = true
	}
	for p := range paths {
		file, anchor, _ := strings.Cut(p, "#")
		info, err := os.Stat(filepath.Join(root, file))
		if err != nil {
			t.Errorf("the code names %s, which does not exist", p)
			continue
		}
		if anchor == "" || info.IsDir() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(root, file)); err != nil || !hasHeading(string(b), anchor) {
			t.Errorf("the code names %s, but %s has no heading for #%s (%v)", p, file, anchor, err)
		}
	}
}

// hasHeading reports whether markdown has a heading whose GitHub anchor is anchor.
func hasHeading(markdown, anchor string) bool {
	for _, line := range strings.Split(markdown, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		slug := regexp.MustCompile(`[^a-z0-9 -]`).ReplaceAllString(title, "")
		if strings.ReplaceAll(slug, " ", "-") == anchor {
			return true
		}
	}
	return false
}

// chartSource is the text of the chart's templates and values.
func chartSource(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(filepath.Join(root, "charts"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".tpl") && !strings.HasSuffix(path, ".txt") {
			return err
		}
		src, err := os.ReadFile(path)
		b.Write(src)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

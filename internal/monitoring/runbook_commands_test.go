package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/util/jsonpath"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// TestRunbookJSONPaths parses every kubectl JSONPath and custom-columns expression in the
// runbooks, so a typo fails here rather than at 3 a.m.
func TestRunbookJSONPaths(t *testing.T) {
	jsonpathArg := regexp.MustCompile(`jsonpath='([^']*)'`)
	columnsArg := regexp.MustCompile(`custom-columns='([^']*)'`)
	checked := 0
	err := filepath.WalkDir(filepath.Join(prereq.RepoRoot(t), "runbooks"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range jsonpathArg.FindAllStringSubmatch(string(b), -1) {
			checked++
			if err := jsonpath.New("runbook").Parse(m[1]); err != nil {
				t.Errorf("%s: jsonpath %q: %v", path, m[1], err)
			}
		}
		for _, m := range columnsArg.FindAllStringSubmatch(string(b), -1) {
			for _, col := range strings.Split(m[1], ",") {
				checked++
				name, expr, ok := strings.Cut(col, ":")
				if !ok || name == "" {
					t.Errorf("%s: custom column %q has no NAME:", path, col)
					continue
				}
				if err := jsonpath.New("runbook").Parse("{" + expr + "}"); err != nil {
					t.Errorf("%s: custom column %q: %v", path, col, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no JSONPath expressions found in the runbooks")
	}
}

// placeholder matches the <things to fill in> of runbook commands.
var placeholder = regexp.MustCompile(`<[A-Za-z][A-Za-z0-9 _.-]*>`)

// TestRunbookShellSyntax checks every sh block of the runbooks with bash -n, placeholders
// filled in, so a copied command does not die on quoting.
func TestRunbookShellSyntax(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)```")
	blocks := 0
	err = filepath.WalkDir(filepath.Join(prereq.RepoRoot(t), "runbooks"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range block.FindAllStringSubmatch(string(b), -1) {
			blocks++
			script := placeholder.ReplaceAllString(dedent(m[1]), "PLACEHOLDER")
			cmd := exec.Command(bash, "-n")
			cmd.Stdin = strings.NewReader(script)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: shell syntax: %v\n%s\n%s", path, err, out, script)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if blocks == 0 {
		t.Fatal("no sh blocks in the runbooks")
	}
}

// dedent removes the indentation of a code block nested in a list item.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

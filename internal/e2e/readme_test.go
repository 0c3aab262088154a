//go:build e2e

package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// readmeCommands returns the commands of README.md's sh blocks, continuation lines joined.
func readmeCommands(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	inBlock, pending := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh"):
			inBlock = true
			continue
		case strings.HasPrefix(line, "```"):
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		line = strings.TrimSpace(strings.SplitN(line, " # ", 2)[0])
		if line == "" {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cmds = append(cmds, strings.Join(strings.Fields(pending+line), " "))
		pending = ""
	}
	return cmds
}

func run(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func fileHas(t *testing.T, path, s string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), s)
}

// TestREADMECommands checks every command of the README: make verbs exist, Helm commands
// render the chart with the same values, widgetctl accepts the same subcommand and flags,
// local-cluster.sh knows the verb, and what needs a cluster is what the demo or CI runs.
func TestREADMECommands(t *testing.T) {
	root := prereq.RepoRoot(t)
	bin := testenv.Assets(t)
	widgetctl := widgetenv.Binary(t, "widgetctl")
	cmds := readmeCommands(t, root)
	if len(cmds) < 8 {
		t.Fatalf("found only %d commands in README.md", len(cmds))
	}
	makeTarget := regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):`)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	for _, cmd := range cmds {
		f := strings.Fields(cmd)
		switch {
		case f[0] == "make":
			for _, target := range f[1:] {
				if !targets[target] {
					t.Errorf("%q: the Makefile has no target %s", cmd, target)
				}
			}
			if f[1] == "test" && !fileHas(t, filepath.Join(root, ".ci/run"), "make test") {
				t.Errorf("%q: .ci/run does not run it", cmd)
			}
		case f[0] == "helm" && (f[1] == "install" || f[1] == "upgrade"):
			// Render the chart with the same release, chart and values.
			args := []string{"template", f[2], f[3], "--kube-version", "1.37.0"}
			// helm template has no use for the flags that only matter against a cluster.
			for i := 4; i < len(f); i++ {
				switch a := f[i]; a {
				case "--reuse-values", "--reset-then-reuse-values", "--create-namespace":
				case "--timeout":
					i++
				default:
					args = append(args, a)
				}
			}
			if out, err := run(t, root, filepath.Join(bin, "helm3"), args...); err != nil {
				t.Errorf("%q: helm %s: %v\n%s", cmd, strings.Join(args, " "), err, out)
			}
			if f[1] == "upgrade" && !fileHas(t, filepath.Join(root, "scripts/demo.sh"), "--set apiUpgrade.stage=") {
				t.Errorf("%q: the demo does not walk the stages", cmd)
			}
		case f[0] == "helm" && (f[1] == "rollback" || f[1] == "uninstall"):
			if !fileHas(t, filepath.Join(root, "internal/e2e/chart_walk_test.go"), `"`+f[1]+`"`) &&
				!fileHas(t, filepath.Join(root, "internal/e2e/uninstall_test.go"), `"`+f[1]+`"`) {
				t.Errorf("%q: no end-to-end test runs helm %s", cmd, f[1])
			}
		case f[0] == "widgetctl":
			if out, err := run(t, root, widgetctl, append(f[1:], "--help")...); err != nil {
				t.Errorf("%q: widgetctl rejects it: %v\n%s", cmd, err, out)
			}
		case f[0] == "apt-get":
			if !fileHas(t, filepath.Join(root, ".ci/run"), "scripts/apt-packages.txt") {
				t.Errorf("%q: .ci/run does not install the same packages", cmd)
			}
		case strings.HasSuffix(f[0], "local-cluster.sh"):
			if !fileHas(t, filepath.Join(root, "scripts/local-cluster.sh"), "\n"+f[1]+")") {
				t.Errorf("%q: local-cluster.sh has no verb %s", cmd, f[1])
			}
		default:
			t.Errorf("%q: no rule checks this README command; add one to this test", cmd)
		}
	}
}

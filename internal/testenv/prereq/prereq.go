// Package prereq finds the repository and the programs that tests run, and fails a test
// whose prerequisite is missing, naming the command that provides it.
//
// It never skips. A skipped integration test looks green while proving nothing, and a test
// that skips on a developer's machine but fails in CI teaches people to ignore it. The make
// verbs check every prerequisite before they build anything (scripts/prereqs.sh); these
// checks are for a test run by hand with `go test`. To leave a whole tier out, use the make
// verbs' opt-out (SKIP_TIERS), which the summary of make test reports.
package prereq

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// ModulePath identifies this repository's go.mod while walking up the tree; the nested
// modules of scripts/tools have go.mod files too and must not be mistaken for the root.
const ModulePath = "github.com/widgetry/widget-operator"

// Root returns the directory of this repository's go.mod. It starts from this source file
// when its path is known (not under -trimpath) and from the working directory otherwise;
// `go test` runs in the package directory, inside the repository.
func Root() (string, error) {
	start, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		start = filepath.Dir(file)
	}
	for dir := start; ; dir = filepath.Dir(dir) {
		if isModuleRoot(dir) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod declaring module %s above %s; run the tests inside the repository", ModulePath, start)
		}
	}
}

// RepoRoot is Root for a test: it fails the test when the root cannot be found.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := Root()
	if err != nil {
		tb.Fatalf("prereq: %v", err)
	}
	return root
}

// isModuleRoot reports whether dir holds the go.mod of this repository's main module.
func isModuleRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}

// Missing fails the test: what is missing, and the command that provides it.
func Missing(tb testing.TB, what, fix string) {
	tb.Helper()
	tb.Fatalf("%s is missing: run %s (the test fails rather than skips: a skipped test proves nothing)", what, fix)
}

// Tool returns bin/<name>, the pinned tool scripts/toolchain.sh builds, failing the test
// when it is not there.
func Tool(tb testing.TB, name string) string {
	tb.Helper()
	p := filepath.Join(RepoRoot(tb), "bin", name)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		Missing(tb, p, "make tools (or just this one: scripts/toolchain.sh "+name+")")
	}
	return p
}

// Command returns the path of a program from the machine's packages, failing the test when
// it is not on PATH. tier is the scripts/prereqs.sh tier whose packages provide it.
func Command(tb testing.TB, name, tier string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(tb, name, "scripts/prereqs.sh "+tier+" (as root it installs the Debian package; scripts/apt-packages.txt names it)")
	}
	return p
}

// Check runs scripts/prereqs.sh for tier without installing anything and fails the test
// with its message when the machine lacks something the tier needs (root, packages, the
// right to make namespaces): the same answer the make verbs give, from the same script.
func Check(tb testing.TB, tier string) {
	tb.Helper()
	root := RepoRoot(tb)
	cmd := exec.Command(filepath.Join(root, "scripts", "prereqs.sh"), tier)
	cmd.Env = append(os.Environ(), "PREREQS_NO_INSTALL=1", "MAKE_VERB=go test (the "+tier+" tier)")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("this machine cannot run the %s tier: %v\n%s", tier, err, out)
	}
}

// ModuleFile returns the path of file in module (path@version) as the Go module proxy serves
// it, downloading the module into the module cache: how the tests get other projects'
// published files (their CRDs) on a machine that has only Go, at a pinned version.
func ModuleFile(tb testing.TB, module, file string) string {
	tb.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = tb.TempDir() // outside this module: its go.mod stays as it is
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); err != nil || jerr != nil || m.Dir == "" {
		tb.Fatalf("go mod download %s: %v %s%s (the Go module proxy must be reachable)", module, err, m.Error, out)
	}
	p := filepath.Join(m.Dir, file)
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("%s has no %s: %v", module, file, err)
	}
	return p
}

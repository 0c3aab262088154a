package scripts

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// verbSources are the files whose commands each prereqs.sh verb runs: the scripts it
// executes, the Go tests of its tier (by build tag), and the Markdown whose commands its
// tests run as written (the runbooks and the README, in the end-to-end tier). A new script or
// test a verb starts belongs here.
var verbSources = map[string][]string{
	"demo":    {"scripts/demo.sh", "scripts/local-cluster.sh"},
	"e2e":     {"scripts/local-cluster.sh", "tag:e2e", "runbooks/**/*.md", "README.md"},
	"envtest": {"tag:envtest"},
	"lint":    {"Makefile#lint"},
}

// aptPackage is a line of scripts/apt-packages.txt.
type aptPackage struct {
	name     string
	checks   []string // what proves it installed: commands, or absolute paths
	commands []string // the checks that are commands
	verbs    []string
}

func aptPackages(t *testing.T) []aptPackage {
	t.Helper()
	f, err := os.Open(filepath.Join(prereq.RepoRoot(t), "scripts", "apt-packages.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var pkgs []aptPackage
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 3 {
			t.Fatalf("apt-packages.txt: %q is not 'package checks verbs'", sc.Text())
		}
		p := aptPackage{name: fields[0], checks: strings.Split(fields[1], ","), verbs: strings.Split(fields[2], ",")}
		for _, c := range p.checks {
			if !filepath.IsAbs(c) {
				p.commands = append(p.commands, c)
			}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// sourceFiles expands a verbSources entry: a path, a ** glob of Markdown, or tag:T (every Go
// test file under internal, cmd and api with the build constraint T). Makefile#T is the recipe
// of target T, which readSource cuts out.
func sourceFiles(t *testing.T, root, pattern string) []string {
	t.Helper()
	var files []string
	switch {
	case strings.HasPrefix(pattern, "tag:"):
		tag := "//go:build " + strings.TrimPrefix(pattern, "tag:")
		for _, dir := range []string{"internal", "cmd", "api"} {
			err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
					return err
				}
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if first, _, _ := strings.Cut(string(b), "\n"); strings.TrimSpace(first) == tag {
					files = append(files, p)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	case strings.Contains(pattern, "**"):
		dir, _, _ := strings.Cut(pattern, "/**")
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	default:
		files = []string{filepath.Join(root, pattern)}
	}
	if len(files) == 1 {
		if _, err := os.Stat(strings.Split(files[0], "#")[0]); err != nil {
			t.Fatalf("verbSources pattern %q: %v", pattern, err)
		}
	}
	if len(files) == 0 {
		t.Fatalf("verbSources pattern %q matches no file", pattern)
	}
	return files
}

// readSource is the file's text, or for path#target the recipe lines of a Makefile target.
func readSource(t *testing.T, file string) string {
	t.Helper()
	path, target, recipe := strings.Cut(file, "#")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !recipe {
		return string(b)
	}
	var lines []string
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, target+":"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			lines = append(lines, line)
		case in:
			in = false
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s has no recipe for %s", path, target)
	}
	return strings.Join(lines, "\n")
}

// runsCommand reports whether the file calls command: in a shell script or a Makefile, as a
// word in command position on a line that is not a comment; in Markdown, inside a fenced code
// block; in Go, as the program named to exec.Command, exec.LookPath or prereq.Command.
func runsCommand(path, text, command string) bool {
	q := regexp.QuoteMeta(command)
	switch {
	case strings.HasSuffix(path, ".go"):
		return regexp.MustCompile(`(exec\.Command(Context)?\((ctx, )?|exec\.LookPath\(|prereq\.Command\(t, )"` + q + `"`).MatchString(text)
	case strings.HasSuffix(path, ".md"):
		word := regexp.MustCompile(`(^|[\s;|&(` + "`" + `])` + q + `(\s|$)`)
		fenced := false
		for line := range strings.SplitSeq(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if fenced && word.MatchString(line) {
				return true
			}
		}
		return false
	default:
		word := regexp.MustCompile(`(^|[\s;|&(` + "`" + `"])` + q + `(\s|"|$)`)
		for line := range strings.SplitSeq(text, "\n") {
			if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "#") {
				continue
			}
			if word.MatchString(line) {
				return true
			}
		}
		return false
	}
}

// TestEachVerbListsThePackagesItRuns derives each verb's Debian packages from what the verb
// really runs: a command of a package called by the demo's scripts, by a tier's tests or by
// the Markdown those tests run must have that verb in the package's list, so that the verb
// alone, on a machine with only Go, installs it (the demo once queried Prometheus with
// promtool while only the envtest tier installed it).
func TestEachVerbListsThePackagesItRuns(t *testing.T) {
	root := prereq.RepoRoot(t)
	pkgs := aptPackages(t)
	for verb, patterns := range verbSources {
		for _, pattern := range patterns {
			for _, file := range sourceFiles(t, root, pattern) {
				text := readSource(t, file)
				for _, p := range pkgs {
					if slices.Contains(p.verbs, "all") || slices.Contains(p.verbs, verb) {
						continue
					}
					for _, c := range p.commands {
						if runsCommand(file, text, c) {
							rel, _ := filepath.Rel(root, file)
							t.Errorf("%s (run by %s) calls %s, from the Debian package %s, whose verbs in scripts/apt-packages.txt are %s: add %s",
								rel, verb, c, p.name, strings.Join(p.verbs, ","), verb)
						}
					}
				}
			}
		}
	}
}

// TestRunsCommandFindsCalls holds the scanner to the calls it must see and the mentions it
// must not, so that the test above cannot pass by seeing nothing.
func TestRunsCommandFindsCalls(t *testing.T) {
	for _, tc := range []struct {
		path, text, command string
		want                bool
	}{
		{"demo.sh", `query() { "$cluster" exec promtool query instant x; }`, "promtool", true},
		{"demo.sh", "\tjq -r .items <x", "jq", true},
		{"demo.sh", "# promtool is not called here", "promtool", false},
		{"demo.sh", `echo "the promtoolkit"`, "promtool", false},
		{"x_test.go", `promtool := prereq.Command(t, "promtool", "envtest")`, "promtool", true},
		{"x_test.go", `exec.CommandContext(ctx, "promtool", "check")`, "promtool", true},
		{"x_test.go", `// promtool checks the rules`, "promtool", false},
		{"page.md", "```bash\nkubectl get x -o json | jq .items\n```", "jq", true},
		{"page.md", "jq is a JSON filter", "jq", false},
	} {
		if got := runsCommand(tc.path, tc.text, tc.command); got != tc.want {
			t.Errorf("runsCommand(%s, %q, %s) = %v, want %v", tc.path, tc.text, tc.command, got, tc.want)
		}
	}
}

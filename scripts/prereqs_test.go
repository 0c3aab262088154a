package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// baseTools are what the make verbs need before prereqs.sh has run: make, a shell, Go and
// the coreutils the script itself uses. Every Debian tool the tiers need is left out.
var baseTools = []string{"make", "bash", "env", "go", "git", "grep", "awk", "sed", "sort", "head", "dirname", "df", "mkdir", "cat"}

// machine is a PATH holding baseTools, a stub id that answers uid, and, unless noAPT, a stub
// apt-get that records each call in the returned file and installs nothing.
func machine(t *testing.T, uid string, noAPT bool) (path, aptLog string) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range baseTools {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	stub := func(name, script string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub("id", "echo "+uid)
	aptLog = filepath.Join(t.TempDir(), "apt-get.log")
	if !noAPT {
		stub("apt-get", `echo "$*" >>`+aptLog)
	}
	return dir, aptLog
}

// makeVerb runs make VERB in the repository on the machine's PATH and returns its output and
// whether it failed. A build must never start: the check comes before it.
func makeVerb(t *testing.T, path, verb string) (string, bool) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", verb)
	cmd.Path = filepath.Join(path, "make")
	cmd.Dir = prereq.RepoRoot(t)
	cmd.Env = append(os.Environ(), "PATH="+path, "SKIP_TIERS=")
	out, err := cmd.CombinedOutput()
	for _, started := range []string{"[toolchain", "go build", "go test", "== 1."} {
		if strings.Contains(string(out), started) {
			t.Errorf("make %s started a build or test (%q) before its prerequisites were met:\n%s", verb, started, out)
		}
	}
	return string(out), err != nil
}

// expectedPackages are the packages of scripts/apt-packages.txt for the given tiers that are
// missing on path: those checked by a command not on it, or by a file that does not exist.
func expectedPackages(t *testing.T, path string, tiers ...string) []string {
	t.Helper()
	var pkgs []string
	for _, p := range aptPackages(t) {
		if !slices.ContainsFunc(p.verbs, func(v string) bool { return slices.Contains(tiers, v) }) {
			continue
		}
		for _, check := range p.checks {
			var err error
			if filepath.IsAbs(check) {
				_, err = os.Stat(check)
			} else {
				_, err = os.Stat(filepath.Join(path, check))
			}
			if err != nil {
				pkgs = append(pkgs, p.name)
				break
			}
		}
	}
	return pkgs
}

func aptCalls(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestDemoInstallsDebianPackagesAsRoot: as root on Debian with the node's tools hidden, make
// demo asks apt-get for exactly the missing packages, and when they still are not there (the
// stub installs nothing) it stops before any build, naming them.
func TestDemoInstallsDebianPackagesAsRoot(t *testing.T) {
	path, log := machine(t, "0", false)
	out, failed := makeVerb(t, path, "demo")
	if !failed {
		t.Fatalf("make demo succeeded with containerd and the rest missing:\n%s", out)
	}
	want := expectedPackages(t, path, "all", "demo")
	for _, p := range []string{"containerd", "prometheus"} {
		if !slices.Contains(want, p) {
			t.Fatalf("expected packages %v lack %s: the hidden PATH does not hide it", want, p)
		}
	}
	calls := aptCalls(t, log)
	wantInstall := "install -y -qq --no-install-recommends " + strings.Join(want, " ")
	if len(calls) != 2 || calls[0] != "update -qq" || calls[1] != wantInstall {
		t.Errorf("apt-get calls = %q, want [update -qq, %s]", calls, wantInstall)
	}
	if !strings.Contains(out, "installing the Debian packages make demo needs: "+strings.Join(want, " ")) {
		t.Errorf("make demo did not say what it installs:\n%s", out)
	}
	if !strings.Contains(out, "still lack") {
		t.Errorf("make demo did not report the packages still missing after apt-get:\n%s", out)
	}
}

// TestTestInstallsEveryTiersPackages: make test needs the envtest tier's packages too, and
// asks for them in the same single apt-get install.
func TestTestInstallsEveryTiersPackages(t *testing.T) {
	path, log := machine(t, "0", false)
	out, failed := makeVerb(t, path, "test")
	if !failed {
		t.Fatalf("make test succeeded with its Debian packages missing:\n%s", out)
	}
	want := expectedPackages(t, path, "all", "envtest", "e2e")
	for _, p := range []string{"prometheus", "yamllint", "containerd"} {
		if !slices.Contains(want, p) {
			t.Fatalf("expected packages %v lack %s: the hidden PATH does not hide it", want, p)
		}
	}
	calls := aptCalls(t, log)
	if wantInstall := "install -y -qq --no-install-recommends " + strings.Join(want, " "); len(calls) != 2 || calls[1] != wantInstall {
		t.Errorf("apt-get calls = %q, want [update -qq, %s]", calls, wantInstall)
	}
}

// TestRefusesAtOnce: where nothing can be installed (no root, no apt-get) the answer is one
// message with the exact command to run, and apt-get is never called.
func TestRefusesAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, verb, uid string
		noAPT           bool
		want            func(path string) string
	}{{
		name: "demo without root", verb: "demo", uid: "1000",
		want: func(string) string { return "run sudo make demo" },
	}, {
		name: "envtest without root names the apt-get command", verb: "test-envtest", uid: "1000",
		want: func(path string) string {
			return "run sudo apt-get install -y --no-install-recommends " + strings.Join(expectedPackages(t, path, "all", "envtest"), " ")
		},
	}, {
		name: "demo as root without apt-get", verb: "demo", uid: "0", noAPT: true,
		want: func(path string) string {
			return "not a Debian or Ubuntu machine (no apt-get): install their equivalents, then rerun: " +
				strings.Join(expectedPackages(t, path, "all", "demo"), " ")
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			path, log := machine(t, tc.uid, tc.noAPT)
			out, failed := makeVerb(t, path, tc.verb)
			if !failed {
				t.Fatalf("make %s succeeded:\n%s", tc.verb, out)
			}
			if want := tc.want(path); !strings.Contains(out, want) {
				t.Errorf("make %s output lacks %q:\n%s", tc.verb, want, out)
			}
			if calls := aptCalls(t, log); calls != nil {
				t.Errorf("apt-get ran: %q", calls)
			}
		})
	}
}

// TestUnitNeedsNothing: the unit tier's check passes on a machine with Go, make and git only.
func TestUnitNeedsNothing(t *testing.T) {
	path, _ := machine(t, "1000", true)
	cmd := exec.Command(filepath.Join(prereq.RepoRoot(t), "scripts", "prereqs.sh"), "unit")
	cmd.Env = append(os.Environ(), "PATH="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("prereqs.sh unit failed with Go and make present: %v\n%s", err, out)
	}
}

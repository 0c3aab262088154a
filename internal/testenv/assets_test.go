package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// fatalRecorder is a testing.TB whose Fatalf and Skip* record the call and end the
// goroutine, as the real ones do, so the failure path can be tested without failing.
type fatalRecorder struct {
	testing.TB // nil: calling anything not overridden panics, which is a test bug
	fatal      string
	skipped    bool
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Skip(...any)          { r.skipped = true; runtime.Goexit() }
func (r *fatalRecorder) Skipf(string, ...any) { r.skipped = true; runtime.Goexit() }
func (r *fatalRecorder) SkipNow()             { r.skipped = true; runtime.Goexit() }

// runAssets calls Assets with a recorder in its own goroutine, since Fatalf ends it.
func runAssets(extra ...string) (dir string, rec *fatalRecorder) {
	rec = &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		dir = assets(rec, extra...)
	}()
	<-done
	return dir, rec
}

func writeExecutables(t *testing.T, dir string, mode os.FileMode, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAssetsFailsWithBuildInstructions(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(assetsEnv, dir)
	writeExecutables(t, dir, 0o755, kubectl)
	writeExecutables(t, dir, 0o644, etcd)

	_, rec := runAssets(kubeControllerManager)

	if rec.skipped {
		t.Fatal("Assets skipped the test; missing binaries must fail it")
	}
	if rec.fatal == "" {
		t.Fatal("Assets did not fail although binaries are missing")
	}
	for _, want := range []string{
		"kube-apiserver, kube-controller-manager missing from " + dir,
		"etcd in " + dir + " not executable",
		"$" + assetsEnv,
		"`make tools`",
		"25 minutes",
	} {
		if !strings.Contains(rec.fatal, want) {
			t.Errorf("the failure message lacks %q:\n%s", want, rec.fatal)
		}
	}
	if strings.Contains(rec.fatal, "kubectl") {
		t.Errorf("the failure message names kubectl, which is present:\n%s", rec.fatal)
	}
}

func TestAssetsReturnsCompleteDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(assetsEnv, dir)
	writeExecutables(t, dir, 0o755, kubeAPIServer, etcd, kubectl)

	got, rec := runAssets()
	if rec.fatal != "" || rec.skipped {
		t.Fatalf("Assets failed on a complete directory: %s", rec.fatal)
	}
	if got != dir {
		t.Errorf("Assets = %q, want $%s = %q", got, assetsEnv, dir)
	}

	// kube-controller-manager is only required when asked for.
	if _, rec := runAssets(kubeControllerManager); !strings.Contains(rec.fatal, "kube-controller-manager missing") {
		t.Errorf("Assets(kube-controller-manager) did not report it missing; got %q", rec.fatal)
	}
}

func TestAssetsDefaultsToRepositoryBin(t *testing.T) {
	t.Setenv(assetsEnv, "")
	dir, fromEnv, err := assetsDir()
	if err != nil {
		t.Fatal(err)
	}
	if root := prereq.RepoRoot(t); fromEnv || dir != filepath.Join(root, "bin") {
		t.Errorf("assetsDir() = %q (from $%s: %v), want %s", dir, assetsEnv, fromEnv, filepath.Join(root, "bin"))
	}
}

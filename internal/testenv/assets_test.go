package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// runAssets calls assets under prereq.Observe, which records its failure instead of failing
// this test.
func runAssets(extra ...string) (dir string, out prereq.Outcome) {
	out = prereq.Observe(func(tb testing.TB) { dir = assets(tb, extra...) })
	return dir, out
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

	if rec.Skipped {
		t.Fatal("Assets skipped the test; missing binaries must fail it")
	}
	if rec.Fatal == "" {
		t.Fatal("Assets did not fail although binaries are missing")
	}
	for _, want := range []string{
		"kube-apiserver, kube-controller-manager missing from " + dir,
		"etcd in " + dir + " not executable",
		"$" + assetsEnv,
		"`make tools`",
		"25 minutes",
	} {
		if !strings.Contains(rec.Fatal, want) {
			t.Errorf("the failure message lacks %q:\n%s", want, rec.Fatal)
		}
	}
	if strings.Contains(rec.Fatal, "kubectl") {
		t.Errorf("the failure message names kubectl, which is present:\n%s", rec.Fatal)
	}
}

func TestAssetsReturnsCompleteDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(assetsEnv, dir)
	writeExecutables(t, dir, 0o755, kubeAPIServer, etcd, kubectl)

	got, rec := runAssets()
	if rec.Fatal != "" || rec.Skipped {
		t.Fatalf("Assets failed on a complete directory: %s", rec.Fatal)
	}
	if got != dir {
		t.Errorf("Assets = %q, want $%s = %q", got, assetsEnv, dir)
	}

	// kube-controller-manager is only required when asked for.
	if _, rec := runAssets(kubeControllerManager); !strings.Contains(rec.Fatal, "kube-controller-manager missing") {
		t.Errorf("Assets(kube-controller-manager) did not report it missing; got %q", rec.Fatal)
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

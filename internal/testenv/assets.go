package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

const (
	// assetsEnv overrides where the binaries are looked up. It is the variable envtest and
	// setup-envtest use, so a developer who already has binaries elsewhere can point at them.
	assetsEnv = "KUBEBUILDER_ASSETS"

	kubeAPIServer         = "kube-apiserver"
	etcd                  = "etcd"
	kubectl               = "kubectl"
	kubeControllerManager = "kube-controller-manager"
)

// controlPlaneBinaries are the binaries every Env needs.
var controlPlaneBinaries = []string{kubeAPIServer, etcd, kubectl}

// Assets returns the directory holding the Kubernetes binaries the tests run:
// $KUBEBUILDER_ASSETS if set, else bin/ at the repository root, where `make tools`
// (scripts/toolchain.sh) builds them.
//
// A missing kube-apiserver, etcd or kubectl fails the test rather than skipping it:
// a skipped integration test looks green in CI while proving nothing.
func Assets(tb testing.TB) string {
	tb.Helper()
	return assets(tb)
}

// assets is Assets with extra binaries that the caller needs on top of the control plane.
func assets(tb testing.TB, extra ...string) string {
	tb.Helper()
	dir, fromEnv, err := assetsDir()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	if err := checkBinaries(dir, fromEnv, slices.Concat(controlPlaneBinaries, extra)...); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return dir
}

// assetsDir reports the binaries directory and whether it came from $KUBEBUILDER_ASSETS.
func assetsDir() (dir string, fromEnv bool, err error) {
	if dir := os.Getenv(assetsEnv); dir != "" {
		return dir, true, nil
	}
	root, err := prereq.Root()
	if err != nil {
		return "", false, err
	}
	return filepath.Join(root, "bin"), false, nil
}

// checkBinaries returns an error naming every binary in names that is not an executable
// file in dir, and telling the reader how to get them.
func checkBinaries(dir string, fromEnv bool, names ...string) error {
	var missing, notExec []string
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			missing = append(missing, name)
		case err != nil:
			return fmt.Errorf("checking test binary %s: %w", name, err)
		case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
			notExec = append(notExec, name)
		}
	}
	if len(missing) == 0 && len(notExec) == 0 {
		return nil
	}

	var b strings.Builder
	if len(missing) > 0 {
		fmt.Fprintf(&b, "%s missing from %s", strings.Join(missing, ", "), dir)
	}
	if len(notExec) > 0 {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s in %s not executable", strings.Join(notExec, ", "), dir)
	}
	if fromEnv {
		fmt.Fprintf(&b, " (the directory comes from $%s; unset it to use the repository's bin/)", assetsEnv)
	}
	b.WriteString(".\nBuild the pinned Kubernetes toolchain into the repository's bin/ with `make tools` " +
		"(scripts/toolchain.sh): about 25 minutes cold on 2 cores, seconds once Go's build cache is warm.")
	return errors.New(b.String())
}

//go:build envtest

package chart

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// TestOldHelmRefused: on a Helm older than the chart needs (3.18, the first with
// helm.sh/hook-output-log-policy, which prints the preflight's refusals), helm install fails
// before anything reaches the cluster, with the minimum version named; the version the chart
// names is the one it checks.
//
// No Helm release older than 3.18 builds against the pinned dependencies of
// scripts/tools/helm3, so the test links the pinned Helm 3 again with the version Helm 3.17.3
// reports (Helm's own version variable, set with -X as scripts/toolchain.sh sets it): the
// chart's check reads .Capabilities.HelmVersion, which is that variable. With the toolchain's
// build cache this is a relink only.
func TestOldHelmRefused(t *testing.T) {
	old := filepath.Join(t.TempDir(), "helm-3.17.3")
	ldflags := "-s -w -X helm.sh/helm/v3/internal/version.version=v3.17.3"
	for _, p := range []string{"helm.sh/helm/v3/pkg/chartutil", "helm.sh/helm/v3/pkg/lint/rules"} {
		ldflags += " -X " + p + ".k8sVersionMajor=1 -X " + p + ".k8sVersionMinor=37"
	}
	build := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", old, "helm.sh/helm/v3/cmd/helm")
	build.Dir = filepath.Join(root, "scripts", "tools", "helm3")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building Helm 3 as v3.17.3: %v\n%s", err, out)
	}
	if v := run(t, ".", old, "version", "--short"); !strings.HasPrefix(v, "v3.17.3") {
		t.Fatalf("the relinked Helm reports %q", v)
	}
	// helm template renders with the capabilities helm install uses (no cluster needed).
	_, err := helmtemplate.Render(helmtemplate.Options{Helm: old, Chart: chartDir})
	if err == nil || !strings.Contains(err.Error(), "this chart needs Helm 3.18.0 or newer") || !strings.Contains(err.Error(), "this is Helm v3.17.3") {
		t.Errorf("helm template on Helm 3.17.3: %v", err)
	}
	// The pinned Helm 3 (3.22) and Helm 4 pass the same check.
	for name, helm := range helms(t) {
		if _, err := helmtemplate.Render(helmtemplate.Options{Helm: helm, Chart: chartDir}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

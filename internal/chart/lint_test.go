//go:build envtest

package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// ciValues are chart-testing's value sets (charts/widget-operator/ci), linted and validated
// like the defaults.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*-values.yaml in the chart: %v", err)
	}
	return files
}

// TestHelmLintStrict: helm lint --strict with Helm 3 and Helm 4, defaults and every ci value set.
func TestHelmLintStrict(t *testing.T) {
	for name, helm := range helms(t) {
		for _, values := range append([]string{""}, ciValues(t)...) {
			args := []string{"lint", "--strict", chartDir}
			if values != "" {
				args = append(args, "--values", values)
			}
			out := run(t, ".", helm, args...)
			if !strings.Contains(out, "0 chart(s) failed") || strings.Contains(out, "[WARNING]") {
				t.Errorf("%s %v:\n%s", name, args, out)
			}
		}
	}
}

// TestCTLint runs chart-testing's lint (helm lint with every ci value set, yamllint of
// Chart.yaml, values.yaml and the ci files) with Helm 3 and Helm 4 as its helm. Maintainer
// validation needs GitHub and chart-schema validation needs yamale (not available here).
func TestCTLint(t *testing.T) {
	ct := tool(t, "ct")
	prereq.Command(t, "yamllint", "envtest")
	lintConf, _ := filepath.Abs(filepath.Join(root, "bin", "ct-etc", "lintconf.yaml"))
	abs, _ := filepath.Abs(chartDir)
	for name, helm := range helms(t) {
		pathDir := t.TempDir()
		if err := os.Symlink(helm, filepath.Join(pathDir, "helm")); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(ct, "lint", "--charts", abs, "--validate-maintainers=false", "--validate-chart-schema=false",
			"--check-version-increment=false", "--lint-conf", lintConf)
		cmd.Env = append(os.Environ(), "PATH="+pathDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "All charts linted successfully") {
			t.Errorf("ct lint with %s: %v\n%s", name, err, out)
		}
	}
}

// TestKubeconform validates the chart rendered at every stage, with every ci value set and
// with the MutatingAdmissionPolicy, with the monitoring APIs present, against the offline strict schemas (Kubernetes v1.37.2,
// cert-manager, prometheus-operator) that scripts/toolchain.sh kubeconform generates.
func TestKubeconform(t *testing.T) {
	kubeconform := tool(t, "kubeconform")
	schemas, _ := filepath.Abs(filepath.Join(root, "bin", "kubeconform-schemas"))
	if _, err := os.Stat(schemas); err != nil {
		t.Fatalf("%s is missing: scripts/toolchain.sh kubeconform", schemas)
	}
	helm := tool(t, "helm3")
	dir := t.TempDir()
	var renders []string
	add := func(name string, o helmtemplate.Options) {
		o.Helm, o.Chart, o.APIVersions = helm, chartDir, helmtemplate.MonitoringAPIs
		out, err := helmtemplate.Render(o)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
		renders = append(renders, p)
	}
	for _, s := range crd.Stages {
		add(string(s), helmtemplate.Options{Values: map[string]any{"apiUpgrade": map[string]any{"stage": string(s)}}})
	}
	// The MutatingAdmissionPolicy route (rendered where the cluster serves it).
	add("mutation-policy", helmtemplate.Options{Values: map[string]any{"webhook": map[string]any{"mutation": "policy"}}})
	for _, f := range ciValues(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]any{}
		if err := yamlUnmarshal(b, &vals); err != nil {
			t.Fatal(err)
		}
		add(strings.TrimSuffix(filepath.Base(f), ".yaml"), helmtemplate.Options{Values: vals})
	}
	args := append([]string{"-strict", "-summary", "-output", "text",
		"-schema-location", schemas + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"}, renders...)
	out, err := exec.Command(kubeconform, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Invalid: 0, Errors: 0, Skipped: 0") {
		t.Errorf("kubeconform: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}

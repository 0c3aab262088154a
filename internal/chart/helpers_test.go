package chart

import (
	"os/exec"
	"path/filepath"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// yamlUnmarshal decodes YAML into v (a values file).
func yamlUnmarshal(b []byte, v any) error { return sigsyaml.Unmarshal(b, v) }

// root is the repository root: go test runs in the package directory.
const root = "../.."

var chartDir = filepath.Join(root, Dir)

// tool returns bin/<name>, skipping the test when it was not built (failing in CI).
func tool(t *testing.T, name string) string {
	t.Helper()
	return prereq.Tool(t, name)
}

// helms are the pinned Helm 3 and Helm 4 CLIs.
func helms(t *testing.T) map[string]string {
	t.Helper()
	return map[string]string{"helm3": tool(t, "helm3"), "helm4": tool(t, "helm4")}
}

// render renders the chart with values using helm3 (or the given CLI) and parses it.
func render(t *testing.T, values map[string]any, apis ...string) helmtemplate.Objects {
	t.Helper()
	return renderWith(t, tool(t, "helm3"), values, apis...)
}

func renderWith(t *testing.T, helm string, values map[string]any, apis ...string) helmtemplate.Objects {
	t.Helper()
	out, err := helmtemplate.Render(helmtemplate.Options{Helm: helm, Chart: chartDir, Values: values, APIVersions: apis})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmtemplate.Parse(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return objs
}

// run runs a command and fails the test with its output on error.
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

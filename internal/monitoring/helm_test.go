//go:build envtest

package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// renderHelm executes the rules template the way Helm does (text/template; trimSuffix is one of
// Helm's sprig functions), with include answering the chart's serving Certificate name helper
// with certificate.
func renderHelm(t *testing.T, tpl []byte, values map[string]any, certificate string) []byte {
	t.Helper()
	include := func(name string, _ any) (string, error) {
		if name != "widget-operator.servingCertificateName" {
			return "", fmt.Errorf("include %q: the rules may use only the serving Certificate's name", name)
		}
		return certificate, nil
	}
	tmpl, err := template.New("rules").Option("missingkey=error").
		Funcs(template.FuncMap{"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) }, "include": include}).
		Parse(string(tpl))
	if err != nil {
		t.Fatalf("parse the Helm rules template: %v", err)
	}
	var out bytes.Buffer
	if err := tmpl.ExecuteTemplate(&out, HelmRulesTemplateName, map[string]any{"Values": values}); err != nil {
		t.Fatalf("render the Helm rules template: %v", err)
	}
	return out.Bytes()
}

func TestRulesHelmTemplate(t *testing.T) {
	tpl, err := RulesHelmTemplate(DefaultHelmValues())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		values map[string]any
		cfg    Config
	}{{
		name:   "chart defaults render the committed rules",
		values: map[string]any{"monitoring": map[string]any{"job": DefaultJob, "runbookBaseURL": DefaultRunbookBaseURL}, "replicaCount": DefaultExpectedReplicas},
		cfg:    DefaultConfig(),
	}, {
		name:   "custom job, base URL with a trailing slash, 3 replicas",
		values: map[string]any{"monitoring": map[string]any{"job": "wo-prod", "runbookBaseURL": "https://runbooks.example.com/widget/"}, "replicaCount": 3},
		cfg:    Config{Job: "wo-prod", RunbookBaseURL: "https://runbooks.example.com/widget", ExpectedReplicas: 3, Certificate: "wo-prod-serving"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := RulesYAML(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := renderHelm(t, tpl, tt.values, tt.cfg.Certificate)
			if !bytes.Equal(got, stripComments(want)) {
				t.Errorf("rendered template differs from RulesYAML(%+v):\n%s", tt.cfg, got)
			}
		})
	}
}

// TestRulesHelmTemplateWithHelm renders the template with the project's pinned Helm CLIs (built
// into bin/ by make tools) inside a throwaway chart and compares the PrometheusRule's spec with
// the rules file.
func TestRulesHelmTemplateWithHelm(t *testing.T) {
	tpl, err := RulesHelmTemplate(DefaultHelmValues())
	if err != nil {
		t.Fatal(err)
	}
	chart := t.TempDir()
	files := map[string]string{
		"Chart.yaml":           "apiVersion: v2\nname: rules-probe\nversion: 0.1.0\n",
		"values.yaml":          "replicaCount: 3\nmonitoring:\n  job: wo-prod\n  runbookBaseURL: https://runbooks.example.com/widget/\n",
		"templates/_rules.tpl": string(tpl),
		// The chart's helper derives the name from the release; the rules only include it.
		"templates/_helpers.tpl": "{{- define \"widget-operator.servingCertificateName\" -}}{{ .Release.Name }}-serving{{- end }}\n",
		"templates/prometheusrule.yaml": "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: widget-operator\nspec:\n" +
			"  {{- include \"" + HelmRulesTemplateName + "\" . | nindent 2 }}\n",
	}
	for name, content := range files {
		p := filepath.Join(chart, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := Rules(Config{Job: "wo-prod", RunbookBaseURL: "https://runbooks.example.com/widget", ExpectedReplicas: 3, Certificate: "widget-operator-serving"})
	if err != nil {
		t.Fatal(err)
	}
	for _, helm := range []string{"helm3", "helm4"} {
		bin := prereq.Tool(t, helm)
		out, err := exec.Command(bin, "template", "widget-operator", chart).CombinedOutput()
		if err != nil {
			t.Fatalf("%s template: %v\n%s", helm, err, out)
		}
		var rendered struct {
			Spec RuleFile `yaml:"spec"`
		}
		if err := yaml.Unmarshal(out, &rendered); err != nil {
			t.Fatalf("%s output: %v\n%s", helm, err, out)
		}
		if diff := cmp.Diff(want, rendered.Spec); diff != "" {
			t.Errorf("%s rendered rules differ (-want +got):\n%s", helm, diff)
		}
	}
}

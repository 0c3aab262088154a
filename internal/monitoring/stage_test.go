//go:build envtest

package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// TestStageExprWithPromtool evaluates the API upgrade dashboard's Stage query with promtool for
// every row of the stage table in internal/crd's package documentation (as a recording rule,
// since promtool tests rules).
func TestStageExprWithPromtool(t *testing.T) {
	promtool := prereq.Command(t, "promtool", "envtest")
	expr := strings.NewReplacer(`job="$job"`, `job="widget-operator"`, `namespace=~"$namespace"`, `namespace=~".*"`).Replace(stageExpr)
	dir := t.TempDir()
	rules := "groups:\n  - name: stage\n    rules:\n      - record: widget:stage\n        expr: |\n" + indent(expr, "          ") + "\n"
	const info = `widget_crd_version_info{job="widget-operator",namespace="widget-system",instance="a",crd="widgets.widgetry.io",`
	const stored = `widget_crd_stored_versions{job="widget-operator",namespace="widget-system",instance="a",crd="widgets.widgetry.io",`
	series := func(s ...string) string {
		var b strings.Builder
		for _, x := range s {
			b.WriteString("      - series: '" + x + "'\n        values: '1x5'\n")
		}
		return b.String()
	}
	stages := []struct {
		name  string
		input string
		want  string
	}{
		{"no CRD", series(`up{job="widget-operator",instance="a"}`), "0"},
		{"initial", series(info+`version="v1alpha1",served="true",storage="true"}`, stored+`version="v1alpha1"}`), "1"},
		{"add-version", series(info+`version="v1alpha1",served="true",storage="true"}`, info+`version="v1",served="true",storage="false"}`, stored+`version="v1alpha1"}`), "2"},
		{"add-version after a rollback", series(info+`version="v1alpha1",served="true",storage="true"}`, info+`version="v1",served="true",storage="false"}`, stored+`version="v1alpha1"}`, stored+`version="v1"}`), "2"},
		{"flip-storage", series(info+`version="v1alpha1",served="true",storage="false"}`, info+`version="v1",served="true",storage="true"}`, stored+`version="v1alpha1"}`, stored+`version="v1"}`), "3"},
		{"migrate", series(info+`version="v1alpha1",served="true",storage="false"}`, info+`version="v1",served="true",storage="true"}`, stored+`version="v1"}`), "4"},
		{"unserve", series(info+`version="v1alpha1",served="false",storage="false"}`, info+`version="v1",served="true",storage="true"}`, stored+`version="v1"}`), "5"},
		{"remove", series(info+`version="v1",served="true",storage="true"}`, stored+`version="v1"}`), "6"},
	}
	var tests strings.Builder
	tests.WriteString("rule_files:\n  - rules.yaml\nevaluation_interval: 1m\ntests:\n")
	for _, s := range stages {
		tests.WriteString("  # " + s.name + "\n  - interval: 1m\n    input_series:\n" + s.input +
			"    promql_expr_test:\n      - expr: widget:stage\n        eval_time: 2m\n        exp_samples:\n          - labels: 'widget:stage'\n            value: " + s.want + "\n")
	}
	for name, content := range map[string]string{"rules.yaml": rules, "stage.test.yaml": tests.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "test", "rules", "stage.test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s\nrules:\n%s", err, out, rules)
	}
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

//go:build envtest

package chart

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/widgetry/widget-operator/internal/monitoring"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// TestMonitoringFollowsTheRelease: the names the alert rules and dashboards select on are the
// ones the chart renders (the admission webhooks, the serving Certificate), and the chart's
// rules and dashboards take the release's values: the Certificate's name follows the release,
// the replica panels are green at replicaCount, the job variable defaults to monitoring.job.
func TestMonitoringFollowsTheRelease(t *testing.T) {
	helm := tool(t, "helm3")
	values := set("replicaCount", 3, "monitoring.job", "wo-prod", "monitoring.prometheusRule.enabled", true, "monitoring.dashboards.enabled", true)
	out, err := helmtemplate.Render(helmtemplate.Options{Helm: helm, Chart: chartDir, Release: "shop", Values: values, APIVersions: helmtemplate.MonitoringAPIs})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmtemplate.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	const fullname = "shop-widget-operator"
	cfg := monitoring.Config{Job: "wo-prod", RunbookBaseURL: monitoring.DefaultRunbookBaseURL, ExpectedReplicas: 3, Certificate: fullname + "-serving"}

	for kind, want := range map[string]string{"MutatingWebhookConfiguration": monitoring.MutatingWebhookName, "ValidatingWebhookConfiguration": monitoring.ValidatingWebhookName} {
		o := objs.Get(kind, fullname)
		if o == nil {
			t.Fatalf("no %s %s", kind, fullname)
		}
		hooks := field(t, o, "webhooks").([]any)
		if len(hooks) != 1 || hooks[0].(map[string]any)["name"] != want {
			t.Errorf("%s webhooks %v: the admission alerts and panels select name %q", kind, hooks, want)
		}
	}
	if objs.Get("Certificate", cfg.Certificate) == nil {
		t.Errorf("no Certificate %s: the certificate alerts and panels select it", cfg.Certificate)
	}

	want, err := monitoring.Rules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pr := objs.Get("PrometheusRule", fullname)
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	got, err := json.Marshal(field(t, pr, "spec"))
	if err != nil {
		t.Fatal(err)
	}
	var rendered monitoring.RuleFile
	if err := yaml.Unmarshal(got, &rendered); err != nil { // JSON is YAML; RuleFile has yaml tags
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, rendered); diff != "" {
		t.Errorf("the PrometheusRule's spec differs from the rules for %+v (-want +got):\n%s", cfg, diff)
	}
	if !strings.Contains(string(got), `name=\"`+cfg.Certificate+`\"`) {
		t.Errorf("the rules do not select the release's Certificate %s", cfg.Certificate)
	}

	dashboards, err := monitoring.DashboardsFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(chartDir, "files", "dashboards", "*.json"))
	if len(files) != len(dashboards) || len(files) == 0 {
		t.Fatalf("%d dashboard files in the chart, %d generated", len(files), len(dashboards))
	}
	for name, j := range dashboards {
		cm := objs.Get("ConfigMap", fullname+"-dashboard-"+strings.TrimPrefix(strings.TrimSuffix(name, ".json"), "widget-operator-"))
		if cm == nil {
			t.Fatalf("no ConfigMap for %s", name)
		}
		if got := field(t, cm, "data", name); got != strings.TrimSuffix(string(j), "\n") {
			t.Errorf("dashboard %s in the chart differs from the dashboard for %+v", name, cfg)
		}
	}
}

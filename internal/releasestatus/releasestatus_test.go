package releasestatus

import (
	"strings"
	"testing"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"

	"github.com/widgetry/widget-operator/internal/certtrust"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

func storedRelease(t *testing.T, st *storage.Storage, name string, revision int, chartName string, config map[string]any, hooks ...*releasev1.Hook) {
	t.Helper()
	rel := &releasev1.Release{Name: name, Namespace: "widget-system", Version: revision, Config: config, Hooks: hooks,
		Info: &releasev1.Info{Status: common.StatusDeployed, Description: "Upgrade complete", LastDeployed: time.Unix(1_800_000_000, 0)},
		Chart: &chart.Chart{Metadata: &chart.Metadata{Name: chartName, Version: "0.3.0", AppVersion: "0.3.0"},
			Values: map[string]any{"apiUpgrade": map[string]any{"stage": "initial"}}}}
	if err := st.Create(rel); err != nil {
		t.Fatal(err)
	}
}

func TestReadReleaseTakesTheStageValueOverTheChartDefault(t *testing.T) {
	st := storage.Init(driver.NewMemory())
	storedRelease(t, st, "widgets", 1, ChartName, nil)
	failed := &releasev1.Hook{Name: "widgets-preflight", Kind: "Job", Events: []releasev1.HookEvent{releasev1.HookPreUpgrade},
		LastRun: releasev1.HookExecution{Phase: releasev1.HookPhaseFailed, StartedAt: time.Unix(1_800_000_100, 0)}}
	storedRelease(t, st, "widgets", 2, ChartName, map[string]any{"apiUpgrade": map[string]any{"stage": "add-version"}}, failed)
	storedRelease(t, st, "other", 1, "not-ours", nil)

	rel, err := readRelease(st, "")
	if err != nil {
		t.Fatal(err)
	}
	if rel.Name != "widgets" || rel.Revision != 2 || rel.Stage != "add-version" || rel.Status != "deployed" || rel.ChartVersion != "0.3.0" {
		t.Fatalf("release %+v: want widgets revision 2 at add-version (the user's value)", rel)
	}
	if len(rel.Hooks) != 1 || rel.Hooks[0].Phase != "Failed" || rel.Hooks[0].StartedAt == nil || rel.Hooks[0].CompletedAt != nil {
		t.Fatalf("hooks %+v: want the failed preflight, started, not completed", rel.Hooks)
	}
	first, err := readRelease(storage.Init(driver.NewMemory()), "widgets")
	if err == nil {
		t.Fatalf("read a release that is not stored: %+v", first)
	}
	storedRelease(t, st, "widgets-b", 1, ChartName, nil)
	if _, err := readRelease(st, ""); err == nil || !strings.Contains(err.Error(), "--release") {
		t.Fatalf("two releases of the chart: %v, want a refusal naming --release", err)
	}
	if rel, err := readRelease(st, "widgets-b"); err != nil || rel.Stage != "initial" {
		t.Fatalf("named release: %+v %v, want the chart's default stage initial", rel, err)
	}
}

func TestStageDrift(t *testing.T) {
	obs := func(stage crd.Stage) *upgrade.Observation {
		return &upgrade.Observation{Exists: true, Stage: stage}
	}
	for _, tc := range []struct {
		chart string
		obs   *upgrade.Observation
		want  string
	}{
		{"add-version", obs(crd.StageAddVersion), ""},
		{"migrate", obs(crd.StageFlipStorage), "migrate hook has not finished"},
		{"flip-storage", obs(crd.StageAddVersion), "renders flip-storage but the CRD is at add-version"},
		{"unserve", &upgrade.Observation{Exists: true, Inconsistent: "v1 is not served"}, "inconsistent: v1 is not served"},
		{"initial", &upgrade.Observation{}, ""},
	} {
		got := stageDrift(StageReport{Chart: tc.chart, Observation: tc.obs})
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("chart %s, CRD %+v: drift %q, want %q", tc.chart, tc.obs, got, tc.want)
		}
	}
}

func TestJudgeServedNamesEachBundleThatDoesNotTrust(t *testing.T) {
	now := time.Now()
	old, next := testcerts.NewCA(t, "old-ca"), testcerts.NewCA(t, "next-ca")
	leaf := old.IssueValid(t, now.Add(-time.Hour), now.Add(24*time.Hour), "widget-operator-webhook.ns.svc")
	judges := []certtrust.Judge{
		{Source: "CustomResourceDefinition widgets.widgetry.io", CABundle: append(append([]byte{}, old.PEM...), next.PEM...), ServerName: "widget-operator-webhook.ns.svc"},
		{Source: "ValidatingWebhookConfiguration x", CABundle: next.PEM, ServerName: "widget-operator-webhook.ns.svc"},
		{Source: "MutatingWebhookConfiguration x", CABundle: old.PEM, ServerName: "elsewhere.ns.svc"},
	}
	later := now.Add(48 * time.Hour)
	got := judgeServed(&certtrust.Served{Chain: string(leaf.CertPEM)}, judges, &Cert{NotAfter: &later}, now)
	if len(got.Untrusted) != 2 || !strings.HasPrefix(got.Untrusted[0], "ValidatingWebhookConfiguration") || !strings.HasPrefix(got.Untrusted[1], "MutatingWebhookConfiguration") {
		t.Fatalf("untrusted %q: want the validating bundle (other CA) and the mutating one (other name)", got.Untrusted)
	}
	if !got.OlderThanCertificate || got.Serial == "" {
		t.Fatalf("served %+v: want older than the Certificate's notAfter", got)
	}
	if got := judgeServed(&certtrust.Served{}, judges, nil, now); len(got.Untrusted) != 1 || got.Untrusted[0] != "no certificate loaded" {
		t.Fatalf("no chain: %+v", got)
	}
}

func TestCausesPutTheOutageFirst(t *testing.T) {
	now := time.Now()
	renewal := now.Add(-2 * time.Hour)
	r := &Report{Namespace: "ns",
		Release:      &Release{Name: "w", Revision: 3, Status: "failed", Description: "pre-upgrade hooks failed"},
		Stage:        StageReport{Drift: "the chart renders flip-storage but the CRD is at add-version"},
		Certificates: []Cert{{Name: "w-serving", Ready: "True", RenewalTime: &renewal, RenewOverdue: true}},
		Replicas:     []Replica{{Pod: "w-1", Ready: false}},
		Paused:       &Pause{Since: now},
		Migration:    &Migration{Phase: "Failed", StorageVersion: "v1", Message: "3 objects failed"},
	}
	got := causes(r, Options{Now: now, StallAfter: 15 * time.Minute})
	var runbooks []string
	for _, c := range got {
		runbooks = append(runbooks, c.Runbook)
	}
	want := []string{
		"runbooks/alerts/WidgetWebhookDown.md",            // no Ready replica: every request fails
		"runbooks/procedures/certificate-rotation.md",     // renewal overdue
		"runbooks/alerts/WidgetControllerPaused.md",       // the pause marker
		"runbooks/alerts/WidgetOperatorNoLeader.md",       // no Lease
		"runbooks/alerts/WidgetStorageMigrationFailed.md", // the migration
		"runbooks/upgrade/README.md",                      // drift
		"runbooks/upgrade/README.md",                      // the failed release
	}
	if strings.Join(runbooks, ",") != strings.Join(want, ",") {
		t.Fatalf("causes:\n%v\nwant runbooks\n%v", got, want)
	}
	if got := causes(&Report{Namespace: "ns", Release: &Release{Status: "deployed"}, Replicas: []Replica{{Ready: true, Serving: &ServedCert{}}}, Leader: &Leader{Holder: "p"}},
		Options{Now: now}); len(got) != 0 {
		t.Fatalf("a healthy release: causes %v, want none", got)
	}
}

// TestCausesCountEachPlane: the two planes are counted apart. Controllers Ready do not hide
// the webhooks' outage, webhooks Ready do not hide a controller plane that is down, and the
// controller plane's pods are never asked which certificate they serve.
func TestCausesCountEachPlane(t *testing.T) {
	now := time.Now()
	healthy := func(r *Report) *Report {
		r.Namespace, r.Release, r.Leader = "ns", &Release{Status: "deployed"}, &Leader{Holder: "w-controller-1"}
		return r
	}
	webhook := func(pod string, ready bool) Replica {
		return Replica{Pod: pod, Plane: "webhook", Ready: ready, Serving: &ServedCert{}}
	}
	controller := func(pod string, ready bool) Replica { return Replica{Pod: pod, Plane: "controller", Ready: ready} }
	for _, tc := range []struct {
		name     string
		replicas []Replica
		want     []string
	}{
		{"both planes Ready", []Replica{webhook("w-webhook-1", true), webhook("w-webhook-2", true), controller("w-controller-1", true), controller("w-controller-2", true)}, nil},
		{"no webhook Ready, the controllers are", []Replica{webhook("w-webhook-1", false), controller("w-controller-1", true), controller("w-controller-2", true)},
			[]string{"none of 1 webhook pods is Ready"}},
		{"no webhook pod at all", []Replica{controller("w-controller-1", true)}, []string{"no webhook pod exists"}},
		{"no controller Ready, the webhooks are", []Replica{webhook("w-webhook-1", true), controller("w-controller-1", false)},
			[]string{"none of 1 controller pods is Ready"}},
		{"no controller pod at all", []Replica{webhook("w-webhook-1", true)}, []string{"no controller pod exists"}},
		{"one of two controllers Ready", []Replica{webhook("w-webhook-1", true), controller("w-controller-1", true), controller("w-controller-2", false)},
			[]string{"1 of 2 controller pods are Ready"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range causes(healthy(&Report{Replicas: tc.replicas}), Options{Now: now}) {
				got = append(got, c.Summary)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("causes %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("cause %q, want %q", got[i], tc.want[i])
				}
			}
		})
	}
}

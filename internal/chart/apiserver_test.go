//go:build envtest

package chart

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
)

// TestReleaseOnAPIServer installs the chart on a real kube-apiserver (envtest, with the CRDs of
// cert-manager and the Prometheus operator, so every object is validated server-side, the
// monitoring ones included through .Capabilities), then walks every stage forward with
// helm upgrade and back with helm rollback, with Helm 3 (client-side apply) and then Helm 4
// (server-side apply) on the same cluster. A stand-in for cainjector writes caBundle with its
// own field manager after the install: no upgrade or rollback may conflict with it or drop it.
// No pods run here, so hooks are skipped (--no-hooks); the end-to-end walk on a real node
// runs them. After each step the live CRD's versions equal crd.ApplyStageFlags. Jumps with the
// hooks off are refused by the chart's stage guard in the apiserver.
func TestReleaseOnAPIServer(t *testing.T) {
	hs := helms(t)
	pomCRDs := filepath.Join(root, "bin", "prometheus-operator-crds")
	cmCRDs := filepath.Join(root, "bin", "cert-manager-crds")
	for _, d := range []string{pomCRDs, cmCRDs} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s is missing: scripts/toolchain.sh cert-manager kubeconform (make tools)", d)
		}
	}
	env := testenv.Start(t, testenv.Options{CRDDirectoryPaths: []string{cmCRDs, pomCRDs}})
	ctx := t.Context()
	const ns = "widget-system"
	if _, err := env.Kubectl(t, "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	chart, _ := filepath.Abs(chartDir)
	helmRun := testenv.HelmOn(t, env, ns)
	ca := base64.StdEncoding.EncodeToString(testcerts.NewCA(t, "cainjector stand-in").PEM)
	webhookConfigs := []schema.GroupVersionKind{
		{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"},
	}
	inject := func(t *testing.T) {
		t.Helper()
		patches := [][]string{{"customresourcedefinition", crd.WidgetName, `{"spec":{"conversion":{"webhook":{"clientConfig":{"caBundle":"` + ca + `"}}}}}`, "merge"}}
		for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
			patches = append(patches, []string{kind, "widget-operator", `[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"` + ca + `"}]`, "json"})
		}
		for _, p := range patches {
			if _, err := env.Kubectl(t, "patch", p[0], p[1], "--type", p[3], "--field-manager", "cainjector", "-p", p[2]); err != nil {
				t.Fatal(err)
			}
		}
	}
	setStoredVersions := func(t *testing.T, versions ...string) {
		t.Helper()
		c := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
			t.Fatal(err)
		}
		c.Status.StoredVersions = versions
		if err := env.Client.Status().Update(ctx, c); err != nil {
			t.Fatalf("set storedVersions %v: %v", versions, err)
		}
	}
	check := func(t *testing.T, stage crd.Stage) {
		t.Helper()
		c := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
			t.Fatal(err)
		}
		want := crd.Widget()
		if err := crd.ApplyStageFlags(want, stage); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(want.Spec.Versions, c.Spec.Versions) {
			t.Errorf("stage %s: live CRD versions differ (-want +got):\n%s", stage, cmp.Diff(want.Spec.Versions, c.Spec.Versions))
		}
		if got := base64.StdEncoding.EncodeToString(c.Spec.Conversion.Webhook.ClientConfig.CABundle); got != ca {
			t.Errorf("stage %s: the CRD's caBundle was dropped", stage)
		}
		for _, gvk := range webhookConfigs {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			if err := env.Client.Get(ctx, client.ObjectKey{Name: "widget-operator"}, u); err != nil {
				t.Fatal(err)
			}
			whs, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			if got, _, _ := unstructured.NestedString(whs[0].(map[string]any), "clientConfig", "caBundle"); got != ca {
				t.Errorf("stage %s: %s's caBundle was dropped", stage, gvk.Kind)
			}
		}
	}
	for _, name := range []string{"helm3", "helm4"} {
		helm := hs[name]
		ok := t.Run(name, func(t *testing.T) {
			if out, err := helmRun(t, helm, "install", "widget-operator", chart, "--no-hooks",
				"--set", "monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboards.enabled=true,networkPolicy.enabled=true"); err != nil {
				t.Fatalf("install: %v\n%s", err, out)
			}
			for _, kind := range []string{"servicemonitor", "prometheusrule", "certificate", "issuer"} {
				if out, err := env.Kubectl(t, "-n", ns, "get", kind, "-o", "name"); err != nil || out == "" {
					t.Errorf("no %s installed: %v", kind, err)
				}
			}
			inject(t)
			check(t, crd.StageInitial)
			if name == "helm4" {
				// Helm 4 applies server-side: its field manager owns the CRD's fields by Apply.
				c := &apiextensionsv1.CustomResourceDefinition{}
				if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
					t.Fatal(err)
				}
				applied := false
				for _, mf := range c.ManagedFields {
					applied = applied || (mf.Operation == "Apply" && strings.Contains(mf.Manager, "helm"))
				}
				if !applied {
					t.Errorf("Helm 4 did not apply server-side: %+v", c.ManagedFields)
				}
			}
			for _, stage := range crd.Stages[1:] {
				if out, err := helmRun(t, helm, "upgrade", "widget-operator", chart, "--no-hooks", "--reuse-values", "--set", "apiUpgrade.stage="+string(stage)); err != nil {
					t.Fatalf("upgrade to %s: %v\n%s", stage, err, out)
				}
				if stage == crd.StageMigrate {
					setStoredVersions(t, "v1") // what the post-upgrade migration hook does
				}
				check(t, stage)
			}
			// helm rollback one stage at a time: revisions 5 (unserve) .. 1 (initial).
			for rev := len(crd.Stages) - 1; rev >= 1; rev-- {
				stage := crd.Stages[rev-1]
				if stage == crd.StageInitial {
					// What the runbook's reverse migration (widgetctl migrate --to v1alpha1) leaves.
					setStoredVersions(t, "v1alpha1")
				}
				if out, err := helmRun(t, helm, "rollback", "widget-operator", fmt.Sprint(rev), "--no-hooks"); err != nil {
					t.Fatalf("rollback to %s (revision %d): %v\n%s", stage, rev, err, out)
				}
				check(t, stage)
			}
			// Without the hooks the apiserver's stage guard still refuses a jump, and the CRD
			// stays at initial: --no-hooks, hooks=false, a rollback to a revision two stages away.
			for _, bypass := range [][]string{
				{"upgrade", "widget-operator", chart, "--no-hooks", "--reuse-values", "--set", "apiUpgrade.stage=unserve"},
				{"upgrade", "widget-operator", chart, "--reuse-values", "--set", "apiUpgrade.hooks=false,apiUpgrade.stage=flip-storage"},
				{"rollback", "widget-operator", "3", "--no-hooks"}, // revision 3 is flip-storage
			} {
				out, err := helmRun(t, helm, bypass...)
				if err == nil || !strings.Contains(out, "widgets.widgetry.io-stage-guard") || !strings.Contains(out, "runbooks/upgrade/") {
					t.Errorf("helm %s: want the stage guard's refusal naming its runbook, got %v:\n%s", strings.Join(bypass, " "), err, out)
				}
				check(t, crd.StageInitial)
			}
			if out, err := helmRun(t, helm, "uninstall", "widget-operator", "--no-hooks"); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out)
			}
			if out, err := env.Kubectl(t, "get", "crd", crd.WidgetName, "-o", "name"); err != nil || !strings.Contains(out, crd.WidgetName) {
				t.Errorf("uninstall deleted the CRD: %v", err)
			}
			if out, _ := env.Kubectl(t, "-n", ns, "get", "deployments,services,certificates", "-o", "name"); strings.TrimSpace(out) != "" {
				t.Errorf("uninstall left: %s", out)
			}
		})
		if !ok {
			return
		}
	}
}

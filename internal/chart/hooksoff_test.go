//go:build envtest

package chart

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/monitoring"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestAdmissionWithoutHooks installs the chart on a real kube-apiserver with helm install
// --no-hooks and with apiUpgrade.hooks=false, with Helm 3 and Helm 4, at initial (v1alpha1
// alone served) and at remove (v1 alone): one version each time, so no read needs the
// conversion webhook our pods serve. None of the admission objects is a hook (helm get hooks
// lists none of them), and each install creates the webhook configurations with the
// matchConditions the chart renders for this cluster, the stage guard and warnings
// ValidatingAdmissionPolicies and the MutatingAdmissionPolicy (the apiserver serves it), each
// with its binding. With the webhooks pointed at a port where nothing listens (the release's
// Service has no pods behind it anyway), once a spec change shows the apiserver calls them
// (through v1alpha1 refused by the mutating webhook: the Widget's conversion data is in a form
// the policy does not read; through v1 admitted past the validating one), a Widget's
// ownerReferences can be added and removed, and a Widget being deleted loses its finalizer and
// goes (widgetenv.SkippedWrites).
func TestAdmissionWithoutHooks(t *testing.T) {
	hs := helms(t)
	cmCRDs := filepath.Join(root, "bin", "cert-manager-crds")
	if _, err := os.Stat(cmCRDs); err != nil {
		t.Fatalf("%s is missing: scripts/toolchain.sh cert-manager (make tools)", cmCRDs)
	}
	env := testenv.Start(t, testenv.Options{CRDDirectoryPaths: []string{cmCRDs}})
	apis := widgetenv.DiscoveredAPIVersions(t, env)
	if !slices.Contains(apis, widgetenv.MutatingAdmissionPolicyAPI) {
		t.Fatalf("the apiserver does not serve %s: the test would not cover the MutatingAdmissionPolicy", widgetenv.MutatingAdmissionPolicyAPI)
	}
	const ns = "widget-system"
	if _, err := env.Kubectl(t, "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	chart, _ := filepath.Abs(chartDir)
	helmRun := testenv.HelmOn(t, env, ns)
	admissionObjects := []struct{ kind, resource, name string }{
		{"MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "widget-operator"},
		{"ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "widget-operator"},
		{"ValidatingAdmissionPolicy", "validatingadmissionpolicies", "widgets.widgetry.io-stage-guard"},
		{"ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", "widgets.widgetry.io-stage-guard"},
		{"ValidatingAdmissionPolicy", "validatingadmissionpolicies", "widgets.widgetry.io-warnings"},
		{"ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", "widgets.widgetry.io-warnings"},
		{"MutatingAdmissionPolicy", "mutatingadmissionpolicies", "widgets.widgetry.io-keep-v1-fields"},
		{"MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings", "widgets.widgetry.io-keep-v1-fields"},
	}
	i := 0
	for _, name := range []string{"helm3", "helm4"} {
		helm := hs[name]
		for _, mode := range []struct {
			name    string
			install []string
		}{
			{"no-hooks", []string{"--no-hooks"}},
			{"hooks-false", []string{"--set", "apiUpgrade.hooks=false"}},
		} {
			for _, tc := range []struct {
				stage                   crd.Stage
				version, size, refusing string
			}{
				{crd.StageInitial, "v1alpha1", "replicas", monitoring.MutatingWebhookName},
				{crd.StageRemove, "v1", "size", ""},
			} {
				i++
				widgets := fmt.Sprintf("apps-%d", i)
				ok := t.Run(name+"/"+mode.name+"/"+tc.version, func(t *testing.T) {
					args := append([]string{"install", "widget-operator", chart, "--set", "apiUpgrade.stage=" + string(tc.stage)}, mode.install...)
					if out, err := helmRun(t, helm, args...); err != nil {
						t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
					}
					hooks, err := helmRun(t, helm, "get", "hooks", "widget-operator")
					if err != nil {
						t.Fatalf("helm get hooks: %v\n%s", err, hooks)
					}
					for _, o := range admissionObjects {
						if strings.Contains(hooks, "kind: "+o.kind+"\n") {
							t.Errorf("the chart makes a %s a hook: --no-hooks would not install it, and a failed hook phase would leave the release without it", o.kind)
						}
						if out, err := env.Kubectl(t, "get", o.resource, o.name, "-o", "name"); err != nil {
							t.Errorf("no %s %s installed: %v\n%s", o.kind, o.name, err, out)
						}
					}
					rendered := widgetenv.RenderChartWebhooks(t, apis, set("apiUpgrade.stage", string(tc.stage)))
					m := &admissionregistrationv1.MutatingWebhookConfiguration{}
					v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
					for _, o := range []client.Object{m, v} {
						if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "widget-operator"}, o); err != nil {
							t.Fatalf("read %T: %v", o, err)
						}
					}
					if diff := cmp.Diff(rendered.Mutating.Webhooks[0].MatchConditions, m.Webhooks[0].MatchConditions); diff != "" || len(m.Webhooks[0].MatchConditions) == 0 {
						t.Errorf("the installed mutating webhook's matchConditions differ from the chart's (-rendered +installed):\n%s", diff)
					}
					if diff := cmp.Diff(rendered.Validating.Webhooks[0].MatchConditions, v.Webhooks[0].MatchConditions); diff != "" || len(v.Webhooks[0].MatchConditions) == 0 {
						t.Errorf("the installed validating webhook's matchConditions differ from the chart's (-rendered +installed):\n%s", diff)
					}

					// Nothing listens at the webhooks' address: only the address changes, the
					// rules, failure policies and matchConditions stay as installed.
					nowhere, nobody := widgetenv.Unreachable(t)
					for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
						path := "/mutate-widgetry-io-widget"
						if kind == "validatingwebhookconfiguration" {
							path = "/validate-widgetry-io-widget"
						}
						p := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig","value":{"url":%q,"caBundle":%q}}]`, nowhere+path, base64.StdEncoding.EncodeToString(nobody))
						if out, err := env.Kubectl(t, "patch", kind, "widget-operator", "--type", "json", "-p", p); err != nil {
							t.Fatalf("point %s nowhere: %v\n%s", kind, err, out)
						}
					}
					if err := env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: widgets}}); err != nil {
						t.Fatal(err)
					}
					createProbe(t, env, tc.version, widgets)
					webhooksInThePath(t, env, tc.version, widgets, "probe", tc.size, tc.refusing)
					for _, w := range widgetenv.SkippedWrites(t, env.Client, tc.version, widgets, "kept-apart") {
						if w.Err != nil {
							t.Errorf("%s through %s with no webhook answering: %v", w.Name, tc.version, w.Err)
						}
					}
					if !t.Failed() {
						gone(t, env, tc.version, "kept-apart", widgets)
					}

					// --no-hooks: the pre-delete cleanup-finalizers Job runs with apiUpgrade.hooks=false
					// too, and no pod runs here.
					if out, err := helmRun(t, helm, "uninstall", "widget-operator", "--no-hooks"); err != nil {
						t.Fatalf("uninstall: %v\n%s", err, out)
					}
					deleteWidgetCRD(t, env)
				})
				if !ok {
					return
				}
			}
		}
	}
}

// deleteWidgetCRD deletes the Widget CRD, which helm uninstall keeps, and waits until it is
// gone, so that the next install creates it at its own stage.
func deleteWidgetCRD(t *testing.T, env *testenv.Env) {
	t.Helper()
	c := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.WidgetName}}
	if err := env.Client.Delete(context.Background(), c); err != nil {
		t.Fatalf("delete the Widget CRD: %v", err)
	}
	testenv.Eventually(t, time.Minute, "the Widget CRD deleted", func() error {
		switch err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(c), c); {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("still there: deletionTimestamp %v, conditions %v", c.DeletionTimestamp, c.Status.Conditions)
	})
}

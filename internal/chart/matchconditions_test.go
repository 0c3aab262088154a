//go:build envtest

package chart

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/monitoring"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// TestDeletionNeverWaitsOnTheWebhooks registers the chart's admission webhook configurations,
// as rendered, on a real apiserver with kube-controller-manager attached, pointed at a port
// where nothing listens: every pod of ours gone. Widgets created beforehand can still be
// deleted with a finalizer on them (removed by a merge patch, as the stuck-finalizers runbook
// does), garbage-collected in the foreground and orphaned, and their namespace deleted. A
// spec change through v1alpha1 is refused by the mutating webhook (failurePolicy Fail: the
// webhooks are in the path, so the admitted writes above were not admitted by accident); one
// through v1 is admitted, the apiserver failing open past the validating webhook
// (failurePolicy Ignore; its fail-open counter shows the call), and the defaulter, which has
// nothing to do for v1, is not called. What the validating webhook refuses, the CRD's CEL
// rules refuse with nothing answering. Through
// v1alpha1 at initial and through v1 at remove: one version served each time, so no
// conversion is involved, only admission.
func TestDeletionNeverWaitsOnTheWebhooks(t *testing.T) {
	for _, tc := range []struct {
		stage    crd.Stage
		version  string
		size     string
		refusing string // the webhook a spec change through version fails on, "" for none
	}{
		{crd.StageInitial, "v1alpha1", "replicas", monitoring.MutatingWebhookName},
		{crd.StageRemove, "v1", "size", ""},
	} {
		t.Run(tc.version, func(t *testing.T) { deletionWithoutWebhooks(t, tc.stage, tc.version, tc.size, tc.refusing) })
	}
}

func deletionWithoutWebhooks(t *testing.T, stage crd.Stage, version, size, refusing string) {
	env := testenv.Start(t, testenv.Options{ControllerManager: true})
	ctx := t.Context()
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := helmtemplate.Into(render(t, set("apiUpgrade.stage", string(stage))).Get("CustomResourceDefinition", crd.WidgetName), c); err != nil {
		t.Fatal(err)
	}
	env.InstallCRDs(t, c)
	const ns = "doomed"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	widget := func(name string, finalizers ...string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "widgetry.io/" + version, "kind": "Widget",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec":     map[string]any{"image": "registry.example.com/doomed:v1", size: int64(0)},
		}}
		u.SetFinalizers(finalizers)
		return u
	}
	create := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("create %s: %v", u.GetName(), err)
		}
		return u
	}
	owned := func(name string, owner *unstructured.Unstructured) *unstructured.Unstructured {
		u := widget(name)
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "widgetry.io/" + version, Kind: "Widget", Name: owner.GetName(), UID: owner.GetUID(), BlockOwnerDeletion: ptr.To(true)}})
		return u
	}
	// Before the webhooks exist (a create calls the validating webhook): what the cluster holds
	// when our pods go.
	finalized := create(widget("finalized", controller.Finalizer))
	fgOwner := create(widget("foreground-owner"))
	fgChild := create(owned("foreground-child", fgOwner))
	orphanOwner := create(widget("orphan-owner"))
	orphan := create(owned("orphan", orphanOwner))
	inNamespace := create(widget("in-namespace", controller.Finalizer))

	nowhere, nobody := widgetenv.Unreachable(t)
	widgetenv.RenderChartWebhooks(t, nil, nil).Install(t, env, nowhere, nobody)
	webhooksInThePath(t, env, version, ns, finalized.GetName(), size, refusing)

	// Validation needs no pod: what the validating webhook used to refuse, the CRD's rules now
	// refuse in the apiserver, before any webhook is called, in the request version's terms.
	endpoints := any([]any{map[string]any{"name": "http", "port": int64(8080)}, map[string]any{"name": "web", "port": int64(8080)}})
	if version == "v1" {
		endpoints = map[string]any{"http": map[string]any{"port": int64(8080)}, "web": map[string]any{"port": int64(8080)}}
	}
	for _, bad := range []struct {
		name, field string
		value       any
		want        string
	}{
		{"bad-image", "image", "team/Server:v1", "spec.image: Invalid value: \"team/Server:v1\": image must be a container image reference"},
		{"bad-ports", "endpoints", endpoints, "spec.endpoints: Invalid value: two endpoints list the same port"},
	} {
		u := widget(bad.name)
		u.Object["spec"].(map[string]any)[bad.field] = bad.value
		err := env.Client.Create(ctx, u)
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "failed calling webhook") {
			t.Errorf("%s with the webhooks unreachable: got %v, want the CRD's refusal %q", bad.name, err, bad.want)
		}
	}

	// A finalizer removed from a Widget being deleted, as kubectl patch does it.
	if err := env.Client.Delete(ctx, widget(finalized.GetName())); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Patch(ctx, widget(finalized.GetName()), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Errorf("removing the finalizer of a Widget being deleted, with the webhooks unreachable: %v", err)
	}
	gone(t, env, version, finalized.GetName(), ns)

	// Foreground deletion: the garbage collector puts its finalizer on the owner, deletes the
	// child, and removes the finalizer again.
	if err := env.Client.Delete(ctx, widget(fgOwner.GetName()), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	gone(t, env, version, fgChild.GetName(), ns)
	gone(t, env, version, fgOwner.GetName(), ns)

	// Orphaning: the garbage collector removes the ownerReference from the dependent, which
	// stays.
	if err := env.Client.Delete(ctx, widget(orphanOwner.GetName()), client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		t.Fatal(err)
	}
	gone(t, env, version, orphanOwner.GetName(), ns)
	testenv.Eventually(t, time.Minute, "the orphan's ownerReference removed by the garbage collector", func() error {
		u := widget(orphan.GetName())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		if refs := u.GetOwnerReferences(); len(refs) > 0 {
			return fmt.Errorf("ownerReferences %v", refs)
		}
		return nil
	})

	// The namespace: its controller deletes every Widget in it; the one with the controller's
	// finalizer waits for it, and the runbook's patch lets it go.
	if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the namespace controller deletes the finalized Widget", func() error {
		u := widget(inNamespace.GetName())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		if u.GetDeletionTimestamp() == nil {
			return fmt.Errorf("not being deleted yet")
		}
		return nil
	})
	if err := env.Client.Patch(ctx, widget(inNamespace.GetName()), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Errorf("removing the finalizer of a Widget in a namespace being deleted, with the webhooks unreachable: %v", err)
	}
	testenv.Eventually(t, 2*time.Minute, "the namespace deleted", func() error {
		n := &corev1.Namespace{}
		err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, n)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("reading it: %w", err)
		}
		return fmt.Errorf("still there: phase %s, conditions %v", n.Status.Phase, n.Status.Conditions)
	})
}

// TestRollbackWithPodsGone: the chart before matchConditions installed the same webhook
// configurations without them (a rollback to it brings them back), so every UPDATE reaches
// the webhooks, which nothing answers here. The mutating webhook (failurePolicy Fail), whose
// through-v1alpha1 condition went too, then refuses, through either version, every write
// widgetenv.SkippedWrites makes: a Widget being deleted keeps its finalizer and ownerReferences cannot
// change until a pod answers again: the rollback costs what the matchConditions buy. One
// version served each time, so no conversion is involved, only admission.
func TestRollbackWithPodsGone(t *testing.T) {
	for _, tc := range []struct {
		stage         crd.Stage
		version, size string
	}{
		{crd.StageInitial, "v1alpha1", "replicas"},
		{crd.StageRemove, "v1", "size"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{})
			c := &apiextensionsv1.CustomResourceDefinition{}
			if err := helmtemplate.Into(render(t, set("apiUpgrade.stage", string(tc.stage))).Get("CustomResourceDefinition", crd.WidgetName), c); err != nil {
				t.Fatal(err)
			}
			env.InstallCRDs(t, c)
			const ns = "rolled-back"
			if err := env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			previous := widgetenv.RenderChartWebhooks(t, nil, nil).WithoutMatchConditions()
			nowhere, nobody := widgetenv.Unreachable(t)
			previous.Install(t, env, nowhere, nobody)
			createProbe(t, env, tc.version, ns)
			webhooksInThePath(t, env, tc.version, ns, "probe", tc.size, monitoring.MutatingWebhookName)
			for _, w := range widgetenv.SkippedWrites(t, env.Client, tc.version, ns, "stuck") {
				if w.Err == nil || !strings.Contains(w.Err.Error(), `failed calling webhook "`+monitoring.MutatingWebhookName+`"`) {
					t.Errorf("%s through %s with the previous chart's webhooks and no pod: got %v, want the unreachable %s's refusal", w.Name, tc.version, w.Err, monitoring.MutatingWebhookName)
				}
			}
		})
	}
}

// createProbe creates the Widget "probe" in ns through version, for webhooksInThePath;
// through v1alpha1 with conversion data the chart's MutatingAdmissionPolicy does not read, so
// that a spec change goes to the mutating webhook where the chart renders the policy too.
func createProbe(t *testing.T, env *testenv.Env, version, ns string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "widgetry.io/" + version, "kind": "Widget",
		"metadata": map[string]any{"namespace": ns, "name": "probe"}, "spec": map[string]any{"image": "registry.example.com/probe:v1"}}}
	if version == "v1alpha1" {
		u.SetAnnotations(map[string]string{conversion.DataAnnotation: widgetenv.NonCanonicalConversionData})
	}
	if err := env.Client.Create(t.Context(), u); err != nil {
		t.Fatalf("create the probe Widget through %s: %v", version, err)
	}
}

// webhooksInThePath waits until a spec change of the Widget name in ns, through version, shows
// that the apiserver calls the webhooks, which nothing answers: the change is refused by the
// webhook named refusing (failurePolicy Fail) or, with refusing "", admitted with the
// validating webhook's fail-open count risen (failurePolicy Ignore). Until the apiserver has
// loaded the configurations neither holds. A write admitted afterwards was not admitted by
// accident.
func webhooksInThePath(t *testing.T, env *testenv.Env, version, ns, name, size, refusing string) {
	t.Helper()
	ctx := t.Context()
	failedOpen := failOpens(t, env, monitoring.ValidatingWebhookName)
	n := 0
	specChange := func() error {
		n++
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("widgetry.io/" + version)
		u.SetKind("Widget")
		u.SetNamespace(ns)
		u.SetName(name)
		return env.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{%q:%d}}`, size, n)))
	}
	if refusing != "" {
		testenv.Eventually(t, 30*time.Second, "a spec change through "+version+" refused by the unreachable "+refusing, func() error {
			err := specChange()
			switch {
			case err == nil:
				return fmt.Errorf("a spec change was admitted with no webhook answering")
			case !strings.Contains(err.Error(), `failed calling webhook "`+refusing+`"`):
				return fmt.Errorf("refused, but not first by %s: %w", refusing, err)
			}
			return nil
		})
		return
	}
	testenv.Eventually(t, 30*time.Second, "a spec change through "+version+" admitted past the unreachable validating webhook", func() error {
		if err := specChange(); err != nil {
			return fmt.Errorf("refused: %w", err)
		}
		if got := failOpens(t, env, monitoring.ValidatingWebhookName); got <= failedOpen {
			return fmt.Errorf("admitted, but the apiserver's fail-open count of %s is %v, as before: the webhook was not in the path yet", monitoring.ValidatingWebhookName, got)
		}
		return nil
	})
}

// gone waits until the Widget name in ns, read through version, no longer exists.
func gone(t *testing.T, env *testenv.Env, version, name, ns string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "Widget "+ns+"/"+name+" deleted", func() error {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("widgetry.io/" + version)
		u.SetKind("Widget")
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, u)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there: deletionTimestamp %v, finalizers %v", u.GetDeletionTimestamp(), u.GetFinalizers())
	})
}

// failOpens reads the apiserver's apiserver_admission_webhook_fail_open_count of the webhook
// named name: the calls that failed and let the request through (failurePolicy Ignore).
func failOpens(t *testing.T, env *testenv.Env, name string) float64 {
	t.Helper()
	var total float64
	for _, m := range env.APIServerMetrics(t)["apiserver_admission_webhook_fail_open_count"].GetMetric() {
		if testenv.Label(m, "name") == name {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

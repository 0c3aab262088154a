//go:build envtest

package chart

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/monitoring"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"

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

	failedOpen := failOpens(t, env, monitoring.ValidatingWebhookName)
	installUnreachableWebhooks(t, env)
	specChange := func() error {
		return env.Client.Patch(ctx, widget(finalized.GetName()), client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{%q:1}}`, size)))
	}
	if refusing != "" {
		// The webhooks are in the path: a spec change through v1alpha1 is refused while
		// nothing answers the defaulter.
		testenv.Eventually(t, 30*time.Second, "a spec change refused by the unreachable "+refusing, func() error {
			err := specChange()
			switch {
			case err == nil:
				return fmt.Errorf("a spec change was admitted with no webhook answering")
			case !strings.Contains(err.Error(), `failed calling webhook "`+refusing+`"`):
				return fmt.Errorf("refused, but not first by %s: %w", refusing, err)
			}
			return nil
		})
	} else {
		// Through v1 the write is admitted: the apiserver called the validating webhook,
		// failed, and failed open (the defaulter is not called at all).
		testenv.Eventually(t, 30*time.Second, "a spec change through "+version+" admitted past the unreachable validating webhook", func() error {
			if err := specChange(); err != nil {
				return fmt.Errorf("refused: %w", err)
			}
			if n := failOpens(t, env, monitoring.ValidatingWebhookName); n <= failedOpen {
				return fmt.Errorf("admitted, but the apiserver's fail-open count of %s is %v, as before: the webhook was not in the path yet", monitoring.ValidatingWebhookName, n)
			}
			return nil
		})
	}

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

// installUnreachableWebhooks creates the chart's mutating and validating webhook
// configurations, as rendered, with their clientConfig pointed at a loopback port where nothing
// listens (testenv.FreePort's: under the ephemeral range, so no connection's source port
// holds it either) and a CA that signed nothing.
func installUnreachableWebhooks(t *testing.T, env *testenv.Env) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	objs := render(t, nil)
	ca := testcerts.NewCA(t, "nobody").PEM
	config := func(c admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + ptr.Deref(c.Service.Path, "")), CABundle: ca}
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := helmtemplate.Into(objs.Kind("MutatingWebhookConfiguration")[0], m); err != nil {
		t.Fatal(err)
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := helmtemplate.Into(objs.Kind("ValidatingWebhookConfiguration")[0], v); err != nil {
		t.Fatal(err)
	}
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig = config(m.Webhooks[i].ClientConfig)
	}
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig = config(v.Webhooks[i].ClientConfig)
	}
	for _, o := range []client.Object{m, v} {
		o.SetAnnotations(nil) // cainjector's annotations: nothing injects here
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
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

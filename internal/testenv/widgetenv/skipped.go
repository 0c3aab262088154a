package widgetenv

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/conversion"
)

// NonCanonicalConversionData is valid conversion data (paused) in a form the chart's
// MutatingAdmissionPolicy does not read (a space), so a v1alpha1 update of a Widget carrying
// it goes to the mutating webhook unless that webhook's matchConditions skip it.
const NonCanonicalConversionData = `{"paused": true}`

// Write is one write of SkippedWrites and what the apiserver answered.
type Write struct {
	Name string
	Err  error
}

// SkippedWrites makes, through version, the writes the chart's webhook matchConditions keep
// from the webhooks (they change neither spec nor annotations), on a Widget named name it
// creates in ns with the controller's finalizer and a ConfigMap as its owner: a second
// ownerReference added, every ownerReference removed, and, once the Widget is being deleted,
// its finalizer removed with a merge patch, as the stuck-finalizers runbook does (after which
// the Widget goes). Each write changes the object whatever the ones before it did. Through
// v1alpha1 the Widget carries NonCanonicalConversionData, which the chart's
// MutatingAdmissionPolicy cannot read, so that where the chart renders the policy the mutating
// webhook's own matchConditions are what keep these writes from it. The create
// is admission's CREATE, which the matchConditions do not skip: it needs the webhooks
// answering or failing open. The writes are made once each, not retried.
func SkippedWrites(tb testing.TB, c client.Client, version, ns, name string) []Write {
	tb.Helper()
	ctx := context.Background()
	var refs []metav1.OwnerReference
	for _, owner := range []string{name + "-owner-a", name + "-owner-b"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: owner}}
		if err := c.Create(ctx, cm); err != nil {
			tb.Fatalf("widgetenv: create ConfigMap %s/%s: %v", ns, owner, err)
		}
		refs = append(refs, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner, UID: cm.UID})
	}
	widget := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "widgetry.io/" + version, "kind": "Widget",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec":     map[string]any{"image": "registry.example.com/skipped:v1"},
		}}
	}
	u := widget()
	u.SetFinalizers([]string{controller.Finalizer})
	u.SetOwnerReferences(refs[:1])
	if version == "v1alpha1" {
		u.SetAnnotations(map[string]string{conversion.DataAnnotation: NonCanonicalConversionData})
	}
	if err := c.Create(ctx, u); err != nil {
		tb.Fatalf("widgetenv: create Widget %s/%s through %s: %v", ns, name, version, err)
	}
	patch := func(p string) error {
		return c.Patch(ctx, widget(), client.RawPatch(types.MergePatchType, []byte(p)))
	}
	both, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": refs}})
	if err != nil {
		tb.Fatal(err)
	}
	out := []Write{
		{"ownerReference added", patch(string(both))},
		{"ownerReferences removed", patch(`{"metadata":{"ownerReferences":null}}`)},
	}
	if err := c.Delete(ctx, widget()); err != nil {
		tb.Fatalf("widgetenv: delete Widget %s/%s: %v", ns, name, err)
	}
	return append(out, Write{"finalizer removed while deleting", patch(`{"metadata":{"finalizers":null}}`)})
}

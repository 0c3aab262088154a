package gatestate

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestRecordingReason: ConfigMaps and Secrets written through the client carry the reason,
// by create, update and merge patch; other kinds (a Widget a migration rewrites) do not.
func TestRecordingReason(t *testing.T) {
	ctx := context.Background()
	base := fake.NewClientBuilder().Build()
	if RecordingReason(base, "") != base {
		t.Error("an empty reason wraps the client")
	}
	c := RecordingReason(base, "why")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Annotations: map[string]string{"keep": "me"}}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	// Written by someone else since: an update and a patch put the reason back.
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
		name := map[bool]string{true: "cm", false: "s"}[isConfigMap(obj)]
		if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, obj); err != nil {
			t.Fatal(err)
		}
		a := obj.GetAnnotations()
		if a[Annotation] != "why" {
			t.Errorf("%s created without the reason: %v", name, a)
		}
		delete(a, Annotation)
		obj.SetAnnotations(a)
		if err := base.Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
		if isConfigMap(obj) {
			if err := c.Update(ctx, obj); err != nil {
				t.Fatal(err)
			}
		} else {
			orig := obj.DeepCopyObject().(client.Object)
			if err := c.Patch(ctx, obj, client.MergeFrom(orig)); err != nil {
				t.Fatal(err)
			}
		}
		got := obj.DeepCopyObject().(client.Object)
		if err := base.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			t.Fatal(err)
		}
		if got.GetAnnotations()[Annotation] != "why" || (name == "s" && got.GetAnnotations()["keep"] != "me") {
			t.Errorf("%s after a write through the client: annotations %v", name, got.GetAnnotations())
		}
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ServiceAccount")
	u.SetNamespace("ns")
	u.SetName("sa")
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	if _, ok := u.GetAnnotations()[Annotation]; ok {
		t.Error("a kind other than ConfigMap and Secret got the reason")
	}
}

func isConfigMap(obj client.Object) bool { _, ok := obj.(*corev1.ConfigMap); return ok }

//go:build envtest

package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
)

// staleClient answers Get with view's metadata (NotFound when nil), as the controller's
// metadata-only cache would, and passes writes to the apiserver: the position of a reconcile
// that read before someone else wrote.
type staleClient struct {
	client.Client
	view client.Object
}

func (s staleClient) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if s.view == nil {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "services"}, key.Name)
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return fmt.Errorf("staleClient: the controller reads children as metadata, not as %T (a typed read would start a full informer)", obj)
	}
	m.ObjectMeta = meta.AsPartialObjectMetadata(s.view.DeepCopyObject().(client.Object)).ObjectMeta
	return nil
}

// TestWriteChildNeverWritesWhatItDoesNotControl holds writeChild to its guarantees against a
// real apiserver, each race made deterministic by a stale view: an object the Widget does not
// control is never written, whether the read showed it, showed it still controlled (the
// orphan-deletion race), or did not show it at all.
func TestWriteChildNeverWritesWhatItDoesNotControl(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	c := env.Client
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	newWidget := func(name string) *v1.Widget {
		return &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, UID: types.UID("uid-" + name), Generation: 1},
			Spec: v1.WidgetSpec{Image: "srv:1", Endpoints: map[string]v1.EndpointSpec{"http": {Port: 8080}, "admin": {Port: 9090}}}}
	}
	live := &WidgetReconciler{Client: c, APIReader: c}
	foreignService := func(t *testing.T, name string) *corev1.Service {
		t.Helper()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, Labels: map[string]string{"app": "victim"}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "victim"}, Ports: []corev1.ServicePort{{Name: "web", Port: 80}}}}
		if err := c.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
		return svc
	}
	// unchanged fails the test unless the Service is still exactly before.
	unchanged := func(t *testing.T, before *corev1.Service) {
		t.Helper()
		after := &corev1.Service{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(before), after); err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion || !reflect.DeepEqual(after.ObjectMeta, before.ObjectMeta) || !reflect.DeepEqual(after.Spec, before.Spec) {
			t.Errorf("Service %s was written:\nbefore %+v\nafter  %+v", before.Name, before, after)
		}
	}

	t.Run("a foreign object read is reported and left alone", func(t *testing.T) {
		before := foreignService(t, "taken")
		w := newWidget("taken")
		_, err := writeChild(ctx, live, w, desiredService(w, "widgetry.io/v1"), &corev1.Service{})
		var conflict *nameConflictError
		if !errors.As(err, &conflict) {
			t.Fatalf("writeChild: %v, want a name conflict", err)
		}
		unchanged(t, before)
	})

	t.Run("a foreign object created after the read is left alone", func(t *testing.T) {
		before := foreignService(t, "late")
		w := newWidget("late")
		notSeen := &WidgetReconciler{Client: staleClient{Client: c}, APIReader: staleClient{Client: c}}
		if _, err := writeChild(ctx, notSeen, w, desiredService(w, "widgetry.io/v1"), &corev1.Service{}); !apierrors.IsAlreadyExists(err) {
			t.Fatalf("writeChild: %v, want AlreadyExists", err)
		}
		unchanged(t, before)
	})

	t.Run("an apply read before an orphan deletion does not re-adopt", func(t *testing.T) {
		w := newWidget("orphan")
		if created, err := writeChild(ctx, live, w, desiredService(w, "widgetry.io/v1"), &corev1.Service{}); err != nil || !created {
			t.Fatalf("writeChild: created %v, %v", created, err)
		}
		view := &corev1.Service{}
		if _, err := writeChild(ctx, live, w, desiredService(w, "widgetry.io/v1"), view); err != nil {
			t.Fatal(err)
		}
		// What the garbage collector does for an orphan deletion.
		orphaned := view.DeepCopy()
		if err := c.Patch(ctx, orphaned, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`))); err != nil {
			t.Fatal(err)
		}
		stale := &WidgetReconciler{Client: staleClient{Client: c, view: view}, APIReader: c}
		if _, err := writeChild(ctx, stale, w, desiredService(w, "widgetry.io/v1"), &corev1.Service{}); !apierrors.IsConflict(err) {
			t.Fatalf("writeChild from a read before the orphaning: %v, want a conflict", err)
		}
		unchanged(t, orphaned)
		// A fresh read finds the Service no longer controlled.
		var conflict *nameConflictError
		if _, err := writeChild(ctx, live, w, desiredService(w, "widgetry.io/v1"), &corev1.Service{}); !errors.As(err, &conflict) {
			t.Fatalf("writeChild after the orphaning: %v, want a name conflict", err)
		}
		unchanged(t, orphaned)
	})

	t.Run("a created child is the controller's apply: a field it stops applying goes", func(t *testing.T) {
		w := newWidget("created")
		created := &corev1.Service{}
		if _, err := writeChild(ctx, live, w, desiredService(w, "widgetry.io/v1"), created); err != nil {
			t.Fatal(err)
		}
		// Upgraded with the create, from its answer: the cache never keeps its fields.
		if needsUpgrade(created) {
			t.Errorf("right after the create, managedFields %+v still hold an Update entry of %s", created.ManagedFields, FieldManager)
		}
		delete(w.Spec.Endpoints, "admin")
		svc := &corev1.Service{}
		if _, err := writeChild(ctx, live, w, desiredService(w, "widgetry.io/v1"), svc); err != nil {
			t.Fatal(err)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" {
			t.Errorf("ports %+v, want http only", svc.Spec.Ports)
		}
		for _, m := range svc.ManagedFields {
			if m.Manager == FieldManager && m.Operation != metav1.ManagedFieldsOperationApply {
				t.Errorf("managed fields entry %s %s left: fields it holds are never removed", m.Manager, m.Operation)
			}
		}
	})

	t.Run("a child left with its fields under Update is upgraded from the cache's marker", func(t *testing.T) {
		// As an older version created it: a plain create, nothing upgraded.
		w := newWidget("older")
		old := &corev1.Service{}
		if err := decodeInto(desiredService(w, "widgetry.io/v1"), old); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, old, client.FieldOwner(FieldManager)); err != nil {
			t.Fatal(err)
		}
		// What the cache holds of it: the marker, not the fields.
		cached := old.DeepCopy()
		if _, err := TrimChild()(cached); err != nil || !needsUpgrade(cached) {
			t.Fatalf("the cached copy %+v (%v) does not carry the marker", cached.ManagedFields, err)
		}
		fromCache := &WidgetReconciler{Client: staleClient{Client: c, view: cached}, APIReader: c}
		delete(w.Spec.Endpoints, "admin")
		svc := &corev1.Service{}
		if _, err := writeChild(ctx, fromCache, w, desiredService(w, "widgetry.io/v1"), svc); err != nil {
			t.Fatal(err)
		}
		if needsUpgrade(svc) || len(svc.Spec.Ports) != 1 {
			t.Errorf("after the write: managedFields %+v, ports %+v; want the fields upgraded and the admin port gone", svc.ManagedFields, svc.Spec.Ports)
		}
	})
}

//go:build envtest

package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

const timeout = 30 * time.Second

func key(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func createNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func alphaWidget(ns, name string) *v1alpha1.Widget {
	return &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.WidgetSpec{Image: "registry.example.com/sample:v1", Replicas: ptr.To[int32](2),
			Endpoints: []v1alpha1.Endpoint{{Name: "http", Port: 8080}, {Name: "admin", Port: 9090}}}}
}

// ownedBy checks obj's controller owner reference: the Widget, through apiVersion, blocking
// owner deletion.
func ownedBy(obj client.Object, w client.Object, apiVersion string) error {
	ref := metav1.GetControllerOf(obj)
	if ref == nil {
		return fmt.Errorf("%T %s has no controller owner reference", obj, obj.GetName())
	}
	if ref.UID != w.GetUID() || ref.Kind != "Widget" || ref.APIVersion != apiVersion || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		return fmt.Errorf("%T %s owner reference %+v, want Widget %s through %s blocking owner deletion", obj, obj.GetName(), *ref, w.GetUID(), apiVersion)
	}
	return nil
}

func catalogEntry(c client.Client, ns, name string) error {
	return c.Get(context.Background(), key(widgetenv.Namespace, controller.CatalogEntryName(ns, name)), &corev1.ConfigMap{})
}

// TestWidgetLifecycle runs the operator against a real apiserver with the garbage collector
// of a real kube-controller-manager: children, owner references, status, drift repair, the
// three deletion propagation policies, and the finalizer with the operator down.
func TestWidgetLifecycle(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	// Stage flip-storage: both versions served and v1 stored, so deleting through v1 works
	// even with the operator (and its conversion webhook) down. Owner references through
	// v1alpha1 at earlier stages are TestControllerFollowsStages' subject.
	op := widgetenv.Setup(t, env, crd.StageFlipStorage)
	// Started after the CRD exists, so the garbage collector knows Widgets from the start
	// rather than after its next discovery resync.
	env.StartControllerManager(t)
	mgr := op.StartManager(t, widgetenv.ManagerOptions{})
	c := env.Client
	ctx := context.Background()
	createNamespace(t, c, "apps")

	w := alphaWidget("apps", "shop")
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	dep, svc := &appsv1.Deployment{}, &corev1.Service{}
	testenv.Eventually(t, timeout, "Deployment and Service owned by the Widget", func() error {
		if err := c.Get(ctx, key("apps", "shop"), dep); err != nil {
			return err
		}
		if err := c.Get(ctx, key("apps", "shop"), svc); err != nil {
			return err
		}
		return errors.Join(ownedBy(dep, w, "widgetry.io/v1"), ownedBy(svc, w, "widgetry.io/v1"))
	})
	if *dep.Spec.Replicas != 2 || len(dep.Spec.Template.Spec.Containers[0].Ports) != 2 || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Name != "admin" {
		t.Errorf("children do not follow the spec: replicas %d, container ports %v, service ports %v", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Ports, svc.Spec.Ports)
	}
	testenv.Eventually(t, timeout, "finalizer, catalog entry and status", func() error {
		got := &v1alpha1.Widget{}
		if err := c.Get(ctx, key("apps", "shop"), got); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(got, controller.Finalizer) {
			return errors.New("no finalizer")
		}
		if got.Status.ObservedGeneration != got.Generation || meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady) == nil || meta.FindStatusCondition(got.Status.Conditions, v1.ConditionProgressing) == nil {
			return fmt.Errorf("status %+v for generation %d", got.Status, got.Generation)
		}
		return catalogEntry(c, "apps", "shop")
	})

	t.Run("observedGeneration follows a spec change made through v1", func(t *testing.T) {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the controller writes the Widget too
			hub := &v1.Widget{}
			if err := c.Get(ctx, key("apps", "shop"), hub); err != nil {
				return err
			}
			hub.Spec.Size = ptr.To[int32](3)
			hub.Spec.Paused = ptr.To(true)
			return c.Update(ctx, hub)
		}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "Deployment scaled and paused, status observed", func() error {
			got := &v1.Widget{}
			if err := c.Get(ctx, key("apps", "shop"), got); err != nil {
				return err
			}
			if err := c.Get(ctx, key("apps", "shop"), dep); err != nil {
				return err
			}
			if *dep.Spec.Replicas != 3 || !dep.Spec.Paused || got.Status.ObservedGeneration != got.Generation {
				return fmt.Errorf("replicas %d paused %v observedGeneration %d generation %d", *dep.Spec.Replicas, dep.Spec.Paused, got.Status.ObservedGeneration, got.Generation)
			}
			if cond := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionProgressing); cond.Reason != v1.ReasonPaused {
				return fmt.Errorf("Progressing %s/%s, want reason Paused", cond.Status, cond.Reason)
			}
			return nil
		})
	})

	t.Run("drift is repaired", func(t *testing.T) {
		if err := c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "shop"}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: widgetenv.Namespace, Name: controller.CatalogEntryName("apps", "shop")}}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "Service and catalog entry recreated", func() error {
			return errors.Join(c.Get(ctx, key("apps", "shop"), &corev1.Service{}), catalogEntry(c, "apps", "shop"))
		})
	})

	t.Run("an endpoint removed from the spec leaves the children", func(t *testing.T) {
		// The Service was just recreated, the Deployment created earlier: both by the
		// controller's create, whose fields must still go when it stops applying them.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			hub := &v1.Widget{}
			if err := c.Get(ctx, key("apps", "shop"), hub); err != nil {
				return err
			}
			delete(hub.Spec.Endpoints, "admin")
			return c.Update(ctx, hub)
		}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "Service and Deployment without the admin port", func() error {
			if err := errors.Join(c.Get(ctx, key("apps", "shop"), dep), c.Get(ctx, key("apps", "shop"), svc)); err != nil {
				return err
			}
			if ports := dep.Spec.Template.Spec.Containers[0].Ports; len(ports) != 1 || ports[0].Name != "http" {
				return fmt.Errorf("container ports %v", ports)
			}
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" {
				return fmt.Errorf("service ports %v", svc.Spec.Ports)
			}
			return nil
		})
	})

	t.Run("background deletion removes the children after the Widget", func(t *testing.T) {
		w := alphaWidget("apps", "bg")
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		waitChildren(t, c, "apps", "bg")
		if err := c.Delete(ctx, w, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "Widget, catalog entry, Deployment and Service gone", func() error {
			return allGone(c, key("apps", "bg"), &v1alpha1.Widget{}, &appsv1.Deployment{}, &corev1.Service{}, catalogKey("apps", "bg"))
		})
	})

	t.Run("foreground deletion keeps the Widget until its Deployment is gone", func(t *testing.T) {
		w := alphaWidget("apps", "fg")
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		waitChildren(t, c, "apps", "fg")
		// A finalizer of the test's holds the Deployment, so the wait is observable.
		hold := &appsv1.Deployment{}
		setHold := func(on bool) {
			t.Helper()
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := c.Get(ctx, key("apps", "fg"), hold); err != nil {
					return err
				}
				if on {
					controllerutil.AddFinalizer(hold, "test.widgetry.io/hold")
				} else {
					controllerutil.RemoveFinalizer(hold, "test.widgetry.io/hold")
				}
				return c.Update(ctx, hold)
			}); err != nil {
				t.Fatal(err)
			}
		}
		setHold(true)
		if err := c.Delete(ctx, w, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "the Deployment is being deleted", func() error {
			if err := c.Get(ctx, key("apps", "fg"), hold); err != nil {
				return err
			}
			if hold.DeletionTimestamp.IsZero() {
				return errors.New("no deletionTimestamp on the Deployment yet")
			}
			return nil
		})
		time.Sleep(2 * time.Second)
		got := &v1alpha1.Widget{}
		if err := c.Get(ctx, key("apps", "fg"), got); err != nil {
			t.Fatalf("the Widget went before its Deployment: %v", err)
		}
		if got.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(got, metav1.FinalizerDeleteDependents) {
			t.Fatalf("Widget deletionTimestamp %v finalizers %v, want foregroundDeletion", got.DeletionTimestamp, got.Finalizers)
		}
		setHold(false)
		testenv.Eventually(t, timeout, "Widget gone after its Deployment", func() error {
			return allGone(c, key("apps", "fg"), &v1alpha1.Widget{}, &appsv1.Deployment{}, &corev1.Service{}, catalogKey("apps", "fg"))
		})
	})

	t.Run("orphan deletion keeps the children without the owner reference", func(t *testing.T) {
		w := alphaWidget("apps", "orphan")
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		waitChildren(t, c, "apps", "orphan")
		if err := c.Delete(ctx, w, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "Widget gone, children orphaned", func() error {
			if err := allGone(c, key("apps", "orphan"), &v1alpha1.Widget{}, catalogKey("apps", "orphan")); err != nil {
				return err
			}
			return orphaned(c, "apps", "orphan")
		})
		// A reconcile that read the Widget before the deletion must not have put an owner
		// reference back, for the garbage collector to delete the children after all.
		time.Sleep(3 * time.Second)
		if err := orphaned(c, "apps", "orphan"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("paused for uninstall, the controller leaves Widgets alone", func(t *testing.T) {
		owner := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: widgetenv.Namespace, Name: "widget-operator"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x:1"}}}}}}
		if err := c.Create(ctx, owner); err != nil {
			t.Fatal(err)
		}
		if err := controller.PauseReconciliation(ctx, c, widgetenv.Namespace, "widget-operator"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the manager's cache sees the marker
		w := alphaWidget("apps", "paused")
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		got := &v1alpha1.Widget{}
		if err := c.Get(ctx, key("apps", "paused"), got); err != nil {
			t.Fatal(err)
		}
		if controllerutil.ContainsFinalizer(got, controller.Finalizer) || c.Get(ctx, key("apps", "paused"), &appsv1.Deployment{}) == nil {
			t.Fatalf("a paused controller reconciled: finalizers %v", got.Finalizers)
		}
		// Status alone shows the pause.
		cond := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionPaused)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1.ReasonControllerPaused ||
			!strings.Contains(cond.Message, widgetenv.Namespace+"/"+controller.PausedConfigMap) || !strings.Contains(cond.Message, "delete it to resume") {
			t.Fatalf("condition Paused %+v, want True %s naming %s/%s", cond, v1.ReasonControllerPaused, widgetenv.Namespace, controller.PausedConfigMap)
		}
		// The marker goes with the manager's Deployment (garbage collector); reconciling resumes.
		if err := c.Delete(ctx, owner); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "the marker is collected with its owner", func() error {
			return allGone(c, key(widgetenv.Namespace, controller.PausedConfigMap), &corev1.ConfigMap{})
		})
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, key("apps", "paused"), got); err != nil {
				return err
			}
			got.Labels = map[string]string{"touched": "yes"}
			return c.Update(ctx, got)
		}); err != nil {
			t.Fatal(err)
		}
		waitChildren(t, c, "apps", "paused")
		testenv.Eventually(t, timeout, "condition Paused removed", func() error {
			if err := c.Get(ctx, key("apps", "paused"), got); err != nil {
				return err
			}
			if cond := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionPaused); cond != nil {
				return fmt.Errorf("condition Paused %+v", cond)
			}
			return nil
		})
	})

	t.Run("with the operator down the Widget stays Terminating, and coming back finishes it", func(t *testing.T) {
		w := alphaWidget("apps", "stuck")
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		waitChildren(t, c, "apps", "stuck")
		testenv.Eventually(t, timeout, "catalog entry", func() error { return catalogEntry(c, "apps", "stuck") })
		mgr.Stop(t, 30*time.Second)
		// Through v1, the storage version: with the operator down its conversion webhook is
		// down too, and only the stored version reads and deletes without it.
		if err := c.Delete(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "stuck"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		got := &v1.Widget{}
		if err := c.Get(ctx, key("apps", "stuck"), got); err != nil {
			t.Fatalf("the Widget is gone with the operator down: %v", err)
		}
		if got.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(got, controller.Finalizer) {
			t.Fatalf("want Terminating with %s, got deletionTimestamp %v finalizers %v", controller.Finalizer, got.DeletionTimestamp, got.Finalizers)
		}
		if err := catalogEntry(c, "apps", "stuck"); err != nil {
			t.Fatalf("catalog entry removed with the operator down: %v", err)
		}
		op.StartManager(t, widgetenv.ManagerOptions{})
		testenv.Eventually(t, timeout, "deletion completes", func() error {
			return allGone(c, key("apps", "stuck"), &v1alpha1.Widget{}, catalogKey("apps", "stuck"))
		})
	})
}

// orphaned checks that the Deployment and the Service exist without owner references.
func orphaned(c client.Client, ns, name string) error {
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
		if err := c.Get(context.Background(), key(ns, name), obj); err != nil {
			return fmt.Errorf("orphaned %T: %w", obj, err)
		}
		if len(obj.GetOwnerReferences()) != 0 {
			return fmt.Errorf("%T still has owner references %v", obj, obj.GetOwnerReferences())
		}
	}
	return nil
}

type catalogObj struct{ client.ObjectKey }

func catalogKey(ns, name string) catalogObj {
	return catalogObj{key(widgetenv.Namespace, controller.CatalogEntryName(ns, name))}
}

// allGone checks that every object (at k, or a catalog entry) is NotFound.
func allGone(c client.Client, k client.ObjectKey, objs ...any) error {
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case catalogObj:
			err = c.Get(context.Background(), o.ObjectKey, &corev1.ConfigMap{})
		case client.Object:
			err = c.Get(context.Background(), k, o)
		}
		if err == nil {
			return fmt.Errorf("%T %v still exists", o, k)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func waitChildren(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	testenv.Eventually(t, timeout, "Deployment and Service of "+name, func() error {
		return errors.Join(c.Get(context.Background(), key(ns, name), &appsv1.Deployment{}), c.Get(context.Background(), key(ns, name), &corev1.Service{}))
	})
}

// TestControllerFollowsStages: the controller works at every stage, watching the storage
// version, and after the flip it rewrites owner references to v1 before v1alpha1 goes.
func TestControllerFollowsStages(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageInitial)
	op.StartManager(t, widgetenv.ManagerOptions{})
	c := env.Client
	ctx := context.Background()
	createNamespace(t, c, "stages")

	w := alphaWidget("stages", "w")
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	expectChildren := func(t *testing.T, size int32, ownerAPIVersion string, within time.Duration) {
		t.Helper()
		testenv.Eventually(t, within, fmt.Sprintf("children with %d replicas owned through %s", size, ownerAPIVersion), func() error {
			dep, svc := &appsv1.Deployment{}, &corev1.Service{}
			if err := errors.Join(c.Get(ctx, key("stages", "w"), dep), c.Get(ctx, key("stages", "w"), svc)); err != nil {
				return err
			}
			if *dep.Spec.Replicas != size {
				return fmt.Errorf("replicas %d", *dep.Spec.Replicas)
			}
			return errors.Join(ownedBy(dep, w, ownerAPIVersion), ownedBy(svc, w, ownerAPIVersion))
		})
	}
	setSize := func(t *testing.T, obj client.Object, size int32) {
		t.Helper()
		// Retried: right after a stage change the apiserver may not serve the version yet,
		// and the controller writes the Widget too.
		testenv.Eventually(t, timeout, fmt.Sprintf("set the size to %d through %T", size, obj), func() error {
			if err := c.Get(ctx, key("stages", "w"), obj); err != nil {
				return err
			}
			switch o := obj.(type) {
			case *v1.Widget:
				o.Spec.Size = &size
			case *v1alpha1.Widget:
				o.Spec.Replicas = &size
			}
			return c.Update(ctx, obj)
		})
	}

	expectChildren(t, 2, "widgetry.io/v1alpha1", timeout)
	setSize(t, &v1alpha1.Widget{}, 3)
	expectChildren(t, 3, "widgetry.io/v1alpha1", timeout)

	op.SetStage(t, crd.StageAddVersion)
	setSize(t, &v1.Widget{}, 4)
	expectChildren(t, 4, "widgetry.io/v1alpha1", timeout)
	// While v1alpha1 is stored, the v1-only fields live in the conversion-data annotation. The
	// Widget watch drops updates without a new generation (widgetEchoes), so every change to
	// them must come with one: through v1 it does, and through v1alpha1 the annotation cannot
	// be changed (admission keeps the stored conversion data).
	var generation int64
	testenv.Eventually(t, timeout, "edit the conversion data through v1alpha1", func() error {
		spoke := &v1alpha1.Widget{}
		if err := c.Get(ctx, key("stages", "w"), spoke); err != nil {
			return err
		}
		spoke.Annotations = map[string]string{conversion.DataAnnotation: conversion.RestoreData{Paused: ptr.To(true)}.Marshal()}
		return c.Update(ctx, spoke)
	})
	if stored := (&v1alpha1.Widget{}); c.Get(ctx, key("stages", "w"), stored) != nil || stored.Annotations[conversion.DataAnnotation] != "" {
		t.Errorf("an edit of the conversion data through v1alpha1 was stored: %v", stored.Annotations)
	} else {
		generation = stored.Generation
	}
	testenv.Eventually(t, timeout, "pause through v1", func() error {
		hub := &v1.Widget{}
		if err := c.Get(ctx, key("stages", "w"), hub); err != nil {
			return err
		}
		hub.Spec.Paused = ptr.To(true)
		return c.Update(ctx, hub)
	})
	if stored := (&v1alpha1.Widget{}); c.Get(ctx, key("stages", "w"), stored) != nil || stored.Generation == generation {
		t.Errorf("spec.paused set through v1 left the generation at %d", generation)
	}
	testenv.Eventually(t, timeout, "the Deployment paused", func() error {
		dep := &appsv1.Deployment{}
		if err := c.Get(ctx, key("stages", "w"), dep); err != nil {
			return err
		}
		if !dep.Spec.Paused {
			return errors.New("not paused")
		}
		return nil
	})

	op.SetStage(t, crd.StageFlipStorage)
	setSize(t, &v1.Widget{}, 5)
	// Seconds after the flip: reconciled through the new storage version, owner references
	// rewritten to v1.
	expectChildren(t, 5, "widgetry.io/v1", 10*time.Second)

	op.SetStage(t, crd.StageUnserve)
	setSize(t, &v1.Widget{}, 6)
	expectChildren(t, 6, "widgetry.io/v1", timeout)
}

// TestNameConflict: a Widget named after a Deployment or Service it does not control never
// writes that object (not even an owner reference), reports it in its status and in an
// event, and leaves it in place when deleted, garbage collector running. The Widget's other
// child is written as usual. Once the name is free, the Widget gets its own child.
func TestNameConflict(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageFlipStorage)
	env.StartControllerManager(t)
	op.StartManager(t, widgetenv.ManagerOptions{})
	c := env.Client
	ctx := context.Background()
	createNamespace(t, c, "names")
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "names", Name: "victim-owner"}}
	if err := c.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	victim := map[string]string{"app": "victim"}

	tests := []struct {
		name string
		// foreign is created before the Widget of its name.
		foreign client.Object
		// kind and controller are how the conflict names it and its controller.
		kind, controller string
		// ours is the Widget's other child, written as usual.
		ours client.Object
	}{{
		name: "svc-taken",
		// What a takeover would repoint. Unlabelled: invisible to the manager's cache, found
		// by its uncached read.
		foreign: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "names", Name: "svc-taken", Labels: victim},
			Spec: corev1.ServiceSpec{Selector: victim, Ports: []corev1.ServicePort{{Name: "web", Port: 80}}}},
		kind: "Service", controller: "no controller",
		ours: &appsv1.Deployment{},
	}, {
		name: "dep-taken",
		// Labelled as the operator's: in the manager's cache, yet controlled by another owner.
		foreign: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "names", Name: "dep-taken",
			Labels:          map[string]string{controller.ManagedByLabel: controller.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: victim},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: victim},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "victim", Image: "victim:1"}}}}}},
		kind: "Deployment", controller: "controller v1 ConfigMap victim-owner",
		ours: &corev1.Service{},
	}}
	for _, tt := range tests {
		t.Run("foreign "+tt.kind, func(t *testing.T) {
			if err := c.Create(ctx, tt.foreign); err != nil {
				t.Fatal(err)
			}
			before := settled(t, c, tt.foreign)
			w := alphaWidget("names", tt.name)
			if err := c.Create(ctx, w); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%s names/%s exists and is not controlled by this Widget (%s)", tt.kind, tt.name, tt.controller)
			testenv.Eventually(t, timeout, "condition Ready NameConflict", func() error {
				return readyReason(c, "names", tt.name, v1.ReasonNameConflict, want)
			})
			testenv.Eventually(t, timeout, "Warning event NameConflict", func() error {
				return nameConflictEvent(c, "names", tt.name, want)
			})

			// Three spec changes, each reconciled (the other child follows them, status
			// observes them), none of them writing the foreign object.
			for port := int32(8081); port <= 8083; port++ {
				setHTTPPort(t, c, "names", tt.name, port)
				testenv.Eventually(t, timeout, fmt.Sprintf("the Widget's own %T serves port %d", tt.ours, port), func() error {
					if err := c.Get(ctx, key("names", tt.name), tt.ours); err != nil {
						return err
					}
					if err := ownedBy(tt.ours, w, "widgetry.io/v1"); err != nil {
						return err
					}
					if got := httpPort(tt.ours); got != port {
						return fmt.Errorf("port %d", got)
					}
					return readyReason(c, "names", tt.name, v1.ReasonNameConflict, want)
				})
			}
			expectUnchanged(t, c, before)

			if err := c.Delete(ctx, w); err != nil {
				t.Fatal(err)
			}
			// Its own child gone, the garbage collector has dealt with the Widget's deletion.
			testenv.Eventually(t, timeout, "Widget and its own child gone", func() error {
				return allGone(c, key("names", tt.name), &v1alpha1.Widget{}, tt.ours)
			})
			expectUnchanged(t, c, before)
		})
	}

	t.Run("once the name is free the Widget gets its own child", func(t *testing.T) {
		foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "names", Name: "freed"},
			Spec: corev1.ServiceSpec{Selector: victim, Ports: []corev1.ServicePort{{Name: "web", Port: 80}}}}
		if err := c.Create(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		w := alphaWidget("names", "freed")
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "condition Ready NameConflict", func() error {
			return readyReason(c, "names", "freed", v1.ReasonNameConflict, "Service names/freed exists")
		})
		// Once its own Deployment is quiet, no event of its reconciles the Widget again.
		settled(t, c, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "names", Name: "freed"}})
		if err := c.Delete(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		// The deletion of an object outside the cache sends no event: the Widget looks again
		// by itself.
		testenv.Eventually(t, timeout, "the Widget's own Service, the conflict cleared", func() error {
			svc := &corev1.Service{}
			if err := c.Get(ctx, key("names", "freed"), svc); err != nil {
				return err
			}
			if err := ownedBy(svc, w, "widgetry.io/v1"); err != nil {
				return err
			}
			if len(svc.Spec.Ports) != 2 {
				return fmt.Errorf("ports %v", svc.Spec.Ports)
			}
			got := &v1.Widget{}
			if err := c.Get(ctx, key("names", "freed"), got); err != nil {
				return err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Reason == v1.ReasonNameConflict {
					return fmt.Errorf("%s still %s: %s", cond.Type, cond.Reason, cond.Message)
				}
			}
			return nil
		})
	})
}

// settled returns obj once it has stopped changing (a Deployment's status is written by the
// deployment controller after its creation), so that any later change is someone else's.
func settled(t *testing.T, c client.Client, obj client.Object) client.Object {
	t.Helper()
	var last client.Object
	testenv.Eventually(t, timeout, fmt.Sprintf("%T %s settled", obj, obj.GetName()), func() error {
		cur := obj.DeepCopyObject().(client.Object)
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		prev := last
		last = cur
		if prev == nil || prev.GetResourceVersion() != cur.GetResourceVersion() {
			time.Sleep(2 * time.Second)
			return fmt.Errorf("resourceVersion %s", cur.GetResourceVersion())
		}
		return nil
	})
	return last
}

// expectUnchanged fails the test unless the object is exactly before: same resourceVersion,
// metadata (labels, owner references, managed fields) and spec.
func expectUnchanged(t *testing.T, c client.Client, before client.Object) {
	t.Helper()
	after := before.DeepCopyObject().(client.Object)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(before), after); err != nil {
		t.Fatalf("the foreign %T %s: %v", before, before.GetName(), err)
	}
	if after.GetResourceVersion() != before.GetResourceVersion() || !equality.Semantic.DeepEqual(after, before) {
		t.Errorf("the foreign %T %s was written: %s", before, before.GetName(), cmp.Diff(before, after))
	}
}

// readyReason checks the Widget's Ready condition: False, reason, message containing message.
func readyReason(c client.Client, ns, name, reason, message string) error {
	got := &v1.Widget{}
	if err := c.Get(context.Background(), key(ns, name), got); err != nil {
		return err
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason || !strings.Contains(cond.Message, message) {
		return fmt.Errorf("Ready %+v, want False %s %q", cond, reason, message)
	}
	if got.Status.ObservedGeneration != got.Generation {
		return fmt.Errorf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
	}
	return nil
}

// nameConflictEvent finds the Warning event NameConflict on the Widget whose note contains note.
func nameConflictEvent(c client.Client, ns, name, note string) error {
	list := &eventsv1.EventList{}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Regarding.Kind == "Widget" && e.Regarding.Name == name && e.Type == corev1.EventTypeWarning &&
			e.Reason == v1.ReasonNameConflict && strings.Contains(e.Note, note) && e.Related != nil && e.Related.Name == name {
			return nil
		}
	}
	return fmt.Errorf("no Warning %s event on Widget %s noting %q among %d events", v1.ReasonNameConflict, name, note, len(list.Items))
}

// setHTTPPort sets the port of the Widget's endpoint http.
func setHTTPPort(t *testing.T, c client.Client, ns, name string, port int32) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		hub := &v1.Widget{}
		if err := c.Get(context.Background(), key(ns, name), hub); err != nil {
			return err
		}
		hub.Spec.Endpoints["http"] = v1.EndpointSpec{Port: port}
		return c.Update(context.Background(), hub)
	}); err != nil {
		t.Fatal(err)
	}
}

// httpPort is the port named http of a Widget's Deployment or Service.
func httpPort(obj client.Object) int32 {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		for _, p := range o.Spec.Template.Spec.Containers[0].Ports {
			if p.Name == "http" {
				return p.ContainerPort
			}
		}
	case *corev1.Service:
		for _, p := range o.Spec.Ports {
			if p.Name == "http" {
				return p.Port
			}
		}
	}
	return 0
}

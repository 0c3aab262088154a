//go:build envtest

package controller_test

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestWritesOnlyWhatChanged (issue #37): a reconcile writes a child only when the Widget
// changes it, or when someone else did. The Deployment's status moving reconciles the Widget
// (its readiness is the Widget's) and writes none of its children; a change of the size
// writes the Deployment and the catalog entry once each and not the Service; a change of a
// port writes the Deployment and the Service once each and not the catalog entry; and a
// child edited or stripped by someone else is put back with one write.
func TestWritesOnlyWhatChanged(t *testing.T) {
	env, m, token := startCountedManager(t, "writes")
	c := env.Client
	ctx := context.Background()
	w := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "writes", Name: "w"},
		Spec: v1.WidgetSpec{Image: "registry.example.com/sample:v1", Size: ptr.To[int32](1),
			Endpoints: map[string]v1.EndpointSpec{"http": {Port: 8080}, "admin": {Port: 9090}}}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	waitChildren(t, c, "writes", "w")
	testenv.Eventually(t, timeout, "the Widget reconciled", func() error {
		if err := c.Get(ctx, key("writes", "w"), w); err != nil {
			return err
		}
		if w.Status.ObservedGeneration != w.Generation {
			return fmt.Errorf("status.observedGeneration %d, generation %d", w.Status.ObservedGeneration, w.Generation)
		}
		return catalogEntry(c, "writes", "w")
	})

	// step runs change, waits for until to hold and for the reconciles to settle, and checks
	// the writes of each kind since before change against want (which counts the test's own).
	step := func(t *testing.T, change func() error, until string, done func() error, want map[string]int) {
		t.Helper()
		m.SettledReconciles(t, token)
		before := env.Writes(t)
		if err := retry.RetryOnConflict(retry.DefaultRetry, change); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, until, done)
		m.SettledReconciles(t, token)
		after := env.Writes(t)
		for _, r := range []string{"deployments", "services", "configmaps"} {
			if got := after[r] - before[r]; got != want[r] {
				t.Errorf("%s: %d writes, want %d", r, got, want[r])
			}
		}
	}
	deployment := func() (*appsv1.Deployment, error) {
		d := &appsv1.Deployment{}
		return d, c.Get(ctx, key("writes", "w"), d)
	}
	ready := func(want metav1.ConditionStatus, replicas int32) func() error {
		return func() error {
			if err := c.Get(ctx, key("writes", "w"), w); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(w.Status.Conditions, v1.ConditionReady)
			if cond == nil || cond.Status != want || w.Status.AvailableReplicas != replicas || cond.ObservedGeneration != w.Generation {
				return fmt.Errorf("Ready %+v, %d available; want %s with %d", cond, w.Status.AvailableReplicas, want, replicas)
			}
			return nil
		}
	}
	// rollOut writes the Deployment's status as its controller would, with n replicas
	// available (no Deployment controller runs here).
	rollOut := func(n int32) func() error {
		return func() error {
			d, err := deployment()
			if err != nil {
				return err
			}
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
			return c.Status().Update(ctx, d)
		}
	}
	setWidget := func(mutate func(*v1.Widget)) func() error {
		return func() error {
			if err := c.Get(ctx, key("writes", "w"), w); err != nil {
				return err
			}
			mutate(w)
			return c.Update(ctx, w)
		}
	}
	deploymentHas := func(what string, ok func(*appsv1.Deployment) bool) func() error {
		return func() error {
			d, err := deployment()
			if err != nil {
				return err
			}
			if !ok(d) {
				return fmt.Errorf("the Deployment has not %s: %+v", what, d.Spec)
			}
			return nil
		}
	}

	t.Run("the Deployment rolls out: the Widget is ready, no child written", func(t *testing.T) {
		step(t, rollOut(1), "the Widget ready", ready(metav1.ConditionTrue, 1), map[string]int{})
		step(t, rollOut(0), "the Widget not ready", ready(metav1.ConditionFalse, 0), map[string]int{})
		step(t, rollOut(1), "the Widget ready again", ready(metav1.ConditionTrue, 1), map[string]int{})
	})
	t.Run("the size changes: the Deployment and the catalog entry, once each", func(t *testing.T) {
		step(t, setWidget(func(w *v1.Widget) { w.Spec.Size = ptr.To[int32](2) }), "2 replicas",
			deploymentHas("2 replicas", func(d *appsv1.Deployment) bool { return ptr.Deref(d.Spec.Replicas, 0) == 2 }),
			map[string]int{"deployments": 1, "configmaps": 1})
	})
	t.Run("a port changes: the Deployment and the Service, once each", func(t *testing.T) {
		step(t, setWidget(func(w *v1.Widget) { w.Spec.Endpoints["http"] = v1.EndpointSpec{Port: 8081} }), "port 8081",
			func() error {
				svc := &corev1.Service{}
				if err := c.Get(ctx, key("writes", "w"), svc); err != nil {
					return err
				}
				return deploymentHas("port 8081", func(d *appsv1.Deployment) bool { return httpPort(d) == 8081 && httpPort(svc) == 8081 })()
			},
			map[string]int{"deployments": 1, "services": 1})
	})
	t.Run("someone edits the replicas: put back with one write", func(t *testing.T) {
		step(t, func() error {
			// As kubectl edit sends it: a patch of what changed, under its own field manager.
			return c.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "writes", Name: "w"}},
				client.RawPatch(types.StrategicMergePatchType, []byte(`{"spec":{"replicas":5}}`)), client.FieldOwner("kubectl-edit"))
		}, "2 replicas again", deploymentHas("2 replicas", func(d *appsv1.Deployment) bool { return ptr.Deref(d.Spec.Replicas, 0) == 2 }),
			map[string]int{"deployments": 2}) // the edit, the repair
	})
	t.Run("someone removes the readiness probe: put back with one write", func(t *testing.T) {
		step(t, func() error {
			return c.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "writes", Name: "w"}},
				client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/template/spec/containers/0/readinessProbe"}]`)))
		}, "the probe back", deploymentHas("its readiness probe", func(d *appsv1.Deployment) bool {
			return d.Spec.Template.Spec.Containers[0].ReadinessProbe != nil
		}), map[string]int{"deployments": 2}) // the removal, the repair
	})
	t.Run("someone empties the catalog entry: put back with one write", func(t *testing.T) {
		name := controller.CatalogEntryName("writes", "w")
		step(t, func() error {
			return c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: widgetenv.Namespace, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"data":{"size":null}}`)))
		}, "the entry's size back", func() error {
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, key(widgetenv.Namespace, name), cm); err != nil {
				return err
			}
			if cm.Data["size"] != "2" {
				return fmt.Errorf("catalog entry data %v", cm.Data)
			}
			return nil
		}, map[string]int{"configmaps": 2})
	})
}

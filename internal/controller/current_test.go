package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/widgetry/widget-operator/api/v1"
)

func currentTestWidget() *v1.Widget {
	return &v1.Widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", UID: types.UID("uid-web"), Generation: 3},
		Spec: v1.WidgetSpec{Image: "srv:1", Size: ptr.To[int32](2), Timeout: ptr.To("5s"),
			Endpoints: map[string]v1.EndpointSpec{"http": {Port: 8080}, "admin": {Port: 9090}}},
	}
}

// appliedDeployment is the Deployment of w as the apiserver keeps it after the apply: what was
// applied, with defaults, other managers' fields and a status around it.
func appliedDeployment(t *testing.T, w *v1.Widget) *appsv1.Deployment {
	t.Helper()
	desired, err := stampApplied(desiredDeployment(w, "widgetry.io/v1"))
	if err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	if err := decodeInto(desired, d); err != nil {
		t.Fatal(err)
	}
	d.TypeMeta = metav1.TypeMeta{} // as a typed read answers
	d.UID, d.ResourceVersion, d.Generation = "uid-dep", "42", 7
	d.CreationTimestamp = metav1.Now()
	d.Annotations["deployment.kubernetes.io/revision"] = "3"
	d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	c := &d.Spec.Template.Spec.Containers[0]
	c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	c.ReadinessProbe.TimeoutSeconds, c.ReadinessProbe.SuccessThreshold = 1, 1
	d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 7, Replicas: 2, AvailableReplicas: 2}
	d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply}}
	return d
}

func TestCurrent(t *testing.T) {
	cases := []struct {
		name   string
		change func(w *v1.Widget, live *appsv1.Deployment)
		want   bool
	}{
		{"as applied, with defaults, status and other managers' fields", func(*v1.Widget, *appsv1.Deployment) {}, true},
		{"a field someone else added", func(_ *v1.Widget, d *appsv1.Deployment) {
			d.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
		}, true},
		{"the Widget's image changed", func(w *v1.Widget, _ *appsv1.Deployment) { w.Spec.Image = "srv:2" }, false},
		{"the replicas edited", func(_ *v1.Widget, d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](5) }, false},
		{"the readiness probe removed", func(_ *v1.Widget, d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].ReadinessProbe = nil }, false},
		{"a label removed", func(_ *v1.Widget, d *appsv1.Deployment) { delete(d.Labels, "app.kubernetes.io/name") }, false},
		{"the owner reference removed", func(_ *v1.Widget, d *appsv1.Deployment) { d.OwnerReferences = nil }, false},
		{"a sidecar container added", func(_ *v1.Widget, d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "proxy", Image: "proxy:1"})
		}, false},
		{"the env reordered", func(_ *v1.Widget, d *appsv1.Deployment) {
			e := d.Spec.Template.Spec.Containers[0].Env
			e[0], e[1] = e[1], e[0]
		}, false},
		// The read shows everything still desired: only the hash tells that WIDGET_TIMEOUT goes.
		{"the Widget's timeout unset", func(w *v1.Widget, _ *appsv1.Deployment) { w.Spec.Timeout = nil }, false},
		{"the hash annotation removed", func(_ *v1.Widget, d *appsv1.Deployment) { delete(d.Annotations, AppliedHashAnnotation) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := currentTestWidget()
			live := appliedDeployment(t, w)
			tc.change(w, live)
			desired, err := stampApplied(desiredDeployment(w, "widgetry.io/v1"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := current(live, desired)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("current = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("the owner reference's apiVersion changed", func(t *testing.T) {
		w := currentTestWidget()
		live := appliedDeployment(t, w)
		desired, err := stampApplied(desiredDeployment(w, "widgetry.io/v1alpha1"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := current(live, desired); err != nil || got {
			t.Errorf("current = %v, %v; want false: the owner reference must move to the storage version", got, err)
		}
	})
}

func TestHashAppliedIsStable(t *testing.T) {
	// Map order must not matter: endpoints and labels are Go maps.
	first, err := hashApplied(desiredService(currentTestWidget(), "widgetry.io/v1"))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := hashApplied(desiredService(currentTestWidget(), "widgetry.io/v1"))
		if err != nil || again != first {
			t.Fatalf("hash %q then %q (%v)", first, again, err)
		}
	}
	w := currentTestWidget()
	w.Spec.Endpoints["http"] = v1.EndpointSpec{Port: 8081}
	if other, _ := hashApplied(desiredService(w, "widgetry.io/v1")); other == first {
		t.Errorf("another port, the same hash %q", other)
	}
}

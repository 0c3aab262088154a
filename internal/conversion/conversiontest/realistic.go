package conversiontest

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// RealisticWidget is a v1alpha1 Widget as a cluster holds it: labels, annotations, an owner
// reference, a finalizer, managedFields, five endpoints and a status with two conditions.
// i makes names and values distinct.
func RealisticWidget(namespace string, i int) *v1alpha1.Widget {
	replicas, timeout := int32(i%5+1), int32(i%300+1)
	created := metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	w := &v1alpha1.Widget{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Widget"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("widget-%05d", i),
			Namespace:         namespace,
			UID:               types.UID(fmt.Sprintf("6c1d1f1e-0000-4000-8000-%012d", i)),
			ResourceVersion:   fmt.Sprint(100000 + i),
			Generation:        int64(i%7 + 1),
			CreationTimestamp: created,
			Labels: map[string]string{
				"app.kubernetes.io/name":       "widget",
				"app.kubernetes.io/instance":   fmt.Sprintf("widget-%05d", i),
				"app.kubernetes.io/managed-by": "widget-operator",
				"team":                         fmt.Sprintf("team-%d", i%12),
			},
			Annotations: map[string]string{
				"widgetry.io/owner-email": fmt.Sprintf("team-%d@example.com", i%12),
				"widgetry.io/description": "a realistic widget used by the conversion benchmarks",
			},
			Finalizers: []string{"widgetry.io/catalog-cleanup"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: "platform", UID: "0e7c0d3c-1111-4000-8000-000000000001",
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: v1alpha1.GroupVersion.String(), Time: &created, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:spec":{".":{},"f:image":{},"f:replicas":{},"f:timeoutSeconds":{}}}`),
			}},
		},
		Spec: v1alpha1.WidgetSpec{
			Replicas:       &replicas,
			Image:          fmt.Sprintf("registry.example.com/widgets/server:v1.%d.0", i%20),
			TimeoutSeconds: &timeout,
		},
		Status: v1alpha1.WidgetStatus{
			AvailableReplicas:  replicas,
			ObservedGeneration: int64(i%7 + 1),
			Conditions: []metav1.Condition{
				{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonAvailable, Message: "all replicas are available", LastTransitionTime: created, ObservedGeneration: int64(i%7 + 1)},
				{Type: v1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: v1.ReasonRolloutComplete, Message: "the deployment has rolled out", LastTransitionTime: created, ObservedGeneration: int64(i%7 + 1)},
			},
		},
	}
	// Distinct ports, as in a Widget the controller can run (its Deployment's container
	// cannot list a port twice), all of four digits.
	for k, name := range []string{"admin", "grpc", "http", "metrics", "probe"} {
		w.Spec.Endpoints = append(w.Spec.Endpoints, v1alpha1.Endpoint{Name: name, Port: int32(8000 + 100*k + i%50)})
	}
	return w
}

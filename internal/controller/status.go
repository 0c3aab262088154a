package controller

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/widgetry/widget-operator/api/v1"
)

// computeStatus derives the Widget's status from its Deployment (nil when there is none
// yet) and from the outcome of this reconcile (reconcileErr). Conditions keep their
// lastTransitionTime while their status does not change.
func computeStatus(w *v1.Widget, old v1.WidgetStatus, dep *appsv1.Deployment, reconcileErr error) v1.WidgetStatus {
	s := *old.DeepCopy()
	s.ObservedGeneration = w.Generation
	desired := int32(1)
	if w.Spec.Size != nil {
		desired = *w.Spec.Size
	}

	ready := metav1.Condition{Type: v1.ConditionReady, ObservedGeneration: w.Generation}
	progressing := metav1.Condition{Type: v1.ConditionProgressing, ObservedGeneration: w.Generation}
	switch {
	case reconcileErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1.ReasonReconcileFailed, truncateMessage(reconcileErr.Error())
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, v1.ReasonReconcileFailed, "the controller could not apply the Widget's children; see events"
	case dep == nil:
		s.AvailableReplicas = 0
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1.ReasonDeploymentMissing, "the Deployment does not exist yet"
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionTrue, v1.ReasonRollingOut, "creating the Deployment"
	default:
		s.AvailableReplicas = dep.Status.AvailableReplicas
		current := dep.Status.ObservedGeneration >= dep.Generation
		if current && dep.Status.AvailableReplicas >= desired && dep.Status.UpdatedReplicas >= desired {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, v1.ReasonAvailable, fmt.Sprintf("%d of %d replicas available", dep.Status.AvailableReplicas, desired)
		} else {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1.ReasonReplicasUnavailable, fmt.Sprintf("%d of %d replicas available", dep.Status.AvailableReplicas, desired)
		}
		switch {
		case ptr.Deref(w.Spec.Paused, false):
			progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, v1.ReasonPaused, "the Widget is paused; its Deployment does not roll out changes"
		case !current || dep.Status.UpdatedReplicas < desired || dep.Status.Replicas > desired || dep.Status.AvailableReplicas < desired:
			progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionTrue, v1.ReasonRollingOut, fmt.Sprintf("%d of %d replicas updated", dep.Status.UpdatedReplicas, desired)
		default:
			progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, v1.ReasonRolloutComplete, "the Deployment has rolled out"
		}
	}
	meta.SetStatusCondition(&s.Conditions, ready)
	meta.SetStatusCondition(&s.Conditions, progressing)
	return s
}

func truncateMessage(m string) string {
	const limit = 1024
	if len(m) > limit {
		return m[:limit]
	}
	return m
}

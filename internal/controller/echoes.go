package controller

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// A reconcile of a new Widget writes its finalizer, its catalog entry, its Deployment and
// Service (and their managedFields' hand-over to the apply) and its status. Each write comes
// back as a watch event for the Widget, and each event would reconcile it again, to find
// nothing to do: two or three reconciles per created Widget, each a read past the cache and a
// conversion. The predicates below drop those echoes of the controller's own writes by what
// they change, not by remembering resourceVersions: an echo can arrive before the write's
// answer, and a remembered version would then be too late to match it.
//
// What still reconciles: a Widget created, deleted or changed in its spec (its generation),
// its owner references, its deletion or any finalizer but the controller's own addition; a
// child deleted, or changed in anything but the managedFields hand-over (its spec, its
// status: a Deployment's readiness is the Widget's, its owner references); a catalog entry
// changed or deleted. A child or a catalog entry that appears is the controller's own
// creation, or one of the initial list, whose Widgets reconcile anyway.

// widgetEchoes passes a Widget's events but the echoes of the controller's own writes: an
// update that changes neither its generation, nor its deletion, nor its owner references,
// nor its finalizers (but for the controller's own, added) is its status or finalizer write
// coming back. (The Widget watch caches metadata only, without labels and annotations, which
// the reconcile does not read; a status written by someone else waits for the next event.)
//
// The v1 fields that v1alpha1 cannot hold (spec.paused, the exact timeout) live in the
// conversion-data annotation while v1alpha1 is stored, and still every change to them comes
// with a new generation: through v1 it is a change of spec to the apiserver, and through
// v1alpha1 the annotation cannot be changed (admission keeps the stored conversion data on
// every update through v1alpha1, so an edit of the annotation stores nothing new). Both are
// TestControllerFollowsStages' checks.
func widgetEchoes() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return !widgetEcho(e.ObjectOld, e.ObjectNew) }}
}

func widgetEcho(before, after client.Object) bool {
	return before.GetGeneration() == after.GetGeneration() &&
		before.GetDeletionTimestamp().Equal(after.GetDeletionTimestamp()) &&
		equality.Semantic.DeepEqual(before.GetOwnerReferences(), after.GetOwnerReferences()) &&
		(slices.Equal(before.GetFinalizers(), after.GetFinalizers()) ||
			slices.Equal(append(slices.Clone(before.GetFinalizers()), Finalizer), after.GetFinalizers()))
}

// childEchoes passes a child's events but its creation and the hand-over of its fields to the
// controller's apply right after it (upgradeManagedFields).
func childEchoes() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool { return !fieldsHandedOver(e.ObjectOld, e.ObjectNew) },
	}
}

// fieldsHandedOver: the update only removed the cache's marker of fields under the Update
// operation (TrimChild): the controller's upgradeManagedFields.
func fieldsHandedOver(before, after client.Object) bool {
	return needsUpgrade(before) && !needsUpgrade(after) &&
		before.GetGeneration() == after.GetGeneration() &&
		before.GetDeletionTimestamp().Equal(after.GetDeletionTimestamp()) &&
		equality.Semantic.DeepEqual(before.GetOwnerReferences(), after.GetOwnerReferences()) &&
		slices.Equal(before.GetFinalizers(), after.GetFinalizers())
}

// catalogEchoes passes a catalog entry's events but its creation, which is the controller's
// apply (or the initial list).
func catalogEchoes() predicate.Predicate {
	return predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}
}

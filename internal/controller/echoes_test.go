package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func objMeta(generation int64, finalizers []string, mutate ...func(*metav1.PartialObjectMetadata)) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "w", ResourceVersion: "1", Generation: generation, Finalizers: finalizers,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "widgetry.io/v1", Kind: "Widget", Name: "w", UID: "u"}}}}
	for _, f := range mutate {
		f(m)
	}
	return m
}

// TestWidgetEcho: an update is the echo of the controller's own write when it changes only
// what the controller writes (status, seen as a new resourceVersion; its own finalizer
// added); anything the reconcile reads makes it a change.
func TestWidgetEcho(t *testing.T) {
	newer := func(m *metav1.PartialObjectMetadata) { m.ResourceVersion = "2" }
	now := metav1.Now()
	for _, c := range []struct {
		name     string
		old, new *metav1.PartialObjectMetadata
		echo     bool
	}{
		{"status written", objMeta(1, nil), objMeta(1, nil, newer), true},
		{"the controller's finalizer added", objMeta(1, nil), objMeta(1, []string{Finalizer}, newer), true},
		{"the controller's finalizer added after another", objMeta(1, []string{"x"}), objMeta(1, []string{"x", Finalizer}, newer), true},
		{"spec changed", objMeta(1, []string{Finalizer}), objMeta(2, []string{Finalizer}, newer), false},
		{"the controller's finalizer removed", objMeta(1, []string{Finalizer}), objMeta(1, nil, newer), false},
		{"another finalizer added", objMeta(1, []string{Finalizer}), objMeta(1, []string{Finalizer, "x"}, newer), false},
		{"deleted", objMeta(1, []string{Finalizer}), objMeta(1, []string{Finalizer}, newer, func(m *metav1.PartialObjectMetadata) { m.DeletionTimestamp = &now }), false},
		{"owner references changed", objMeta(1, nil), objMeta(1, nil, newer, func(m *metav1.PartialObjectMetadata) { m.OwnerReferences = nil }), false},
	} {
		if got := widgetEcho(c.old, c.new); got != c.echo {
			t.Errorf("%s: echo %t, want %t", c.name, got, c.echo)
		}
	}
}

// TestFieldsHandedOver: only the removal of the cache's marker of Update-operation fields,
// with nothing else changed, is the controller's own hand-over; a status update (a new
// resourceVersion, the marker kept or already gone) is a change.
func TestFieldsHandedOver(t *testing.T) {
	marked := func(m *metav1.PartialObjectMetadata) { m.ManagedFields = []metav1.ManagedFieldsEntry{upgradeMarker} }
	newer := func(m *metav1.PartialObjectMetadata) { m.ResourceVersion = "2" }
	for _, c := range []struct {
		name     string
		old, new *metav1.PartialObjectMetadata
		echo     bool
	}{
		{"marker removed", objMeta(1, nil, marked), objMeta(1, nil, newer), true},
		{"status written while marked", objMeta(1, nil, marked), objMeta(1, nil, marked, newer), false},
		{"status written after the hand-over", objMeta(1, nil), objMeta(1, nil, newer), false},
		{"marker removed with a spec change", objMeta(1, nil, marked), objMeta(2, nil, newer), false},
		{"marker removed with the owner reference", objMeta(1, nil, marked), objMeta(1, nil, newer, func(m *metav1.PartialObjectMetadata) { m.OwnerReferences = nil }), false},
	} {
		if got := fieldsHandedOver(c.old, c.new); got != c.echo {
			t.Errorf("%s: echo %t, want %t", c.name, got, c.echo)
		}
	}
}

package controller

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/widgetry/widget-operator/api/v1"
)

// TestTrimChild: a child keeps, of its managedFields, only the marker that its fields still
// need an upgrade, without the fields themselves; and neither labels nor annotations, while
// what the controller decides on (owner references, UID, resourceVersion) stays.
func TestTrimChild(t *testing.T) {
	fields := metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{}}}`)
	entry := func(manager string, op metav1.ManagedFieldsOperationType) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: fields}
	}
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		kept    bool
	}{
		{"applied by the controller, status by another manager", []metav1.ManagedFieldsEntry{entry(FieldManager, metav1.ManagedFieldsOperationApply), entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate)}, false},
		{"created by the controller, not yet upgraded: the marker", []metav1.ManagedFieldsEntry{entry(FieldManager, metav1.ManagedFieldsOperationUpdate), entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate)}, true},
		{"another manager's update only", []metav1.ManagedFieldsEntry{entry("kubectl", metav1.ManagedFieldsOperationUpdate)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner := metav1.OwnerReference{APIVersion: "widgetry.io/v1", Kind: "Widget", Name: "w", UID: "wu", Controller: ptr.To(true)}
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", UID: "du", ResourceVersion: "9", ManagedFields: tc.entries,
				Labels: map[string]string{ManagedByLabel: ManagedByValue}, Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"},
				OwnerReferences: []metav1.OwnerReference{owner}}}
			out, err := TrimChild()(d)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*appsv1.Deployment).ManagedFields
			var want []metav1.ManagedFieldsEntry
			if tc.kept {
				want = []metav1.ManagedFieldsEntry{upgradeMarker}
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("managedFields %v after the transform; want %v", got, want)
			}
			if d.Labels != nil || d.Annotations != nil {
				t.Errorf("labels %v and annotations %v kept; want both dropped", d.Labels, d.Annotations)
			}
			if d.UID != "du" || d.ResourceVersion != "9" || !metav1.IsControlledBy(d, &v1.Widget{ObjectMeta: metav1.ObjectMeta{UID: "wu"}}) {
				t.Errorf("identity or owner lost: %+v", d.ObjectMeta)
			}
			if needsUpgrade(d) != tc.kept {
				t.Errorf("after the transform needsUpgrade = %v, want %v", needsUpgrade(d), tc.kept)
			}
		})
	}
	if out, err := TrimChild()("not an object"); err != nil || out != "not an object" {
		t.Errorf("a non-object: %v, %v", out, err)
	}
}

// TestTrimWatchedWidget: the Widget watch keeps what identifies the Widget and its state
// (name, UID, resourceVersion, generation, finalizers, deletion) and drops labels,
// annotations and managedFields.
func TestTrimWatchedWidget(t *testing.T) {
	now := metav1.Now()
	in := widgetMetadata("v1")
	in.ObjectMeta = metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u", ResourceVersion: "7", Generation: 3,
		Labels: map[string]string{"team": "a"}, Finalizers: []string{Finalizer}, DeletionTimestamp: &now,
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{…}", "widgetry.io/conversion-data": "{…}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}}
	want := in.DeepCopy()
	want.Labels, want.Annotations, want.ManagedFields = nil, nil, nil

	out, err := TrimWatchedWidget()(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*metav1.PartialObjectMetadata); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("after the transform:\n%+v\nwant\n%+v", got, want)
	}
	if out, err := TrimWatchedWidget()("not an object"); err != nil || out != "not an object" {
		t.Errorf("a non-object: %v, %v", out, err)
	}
}

// TestTrimCatalogEntry: a catalog entry keeps its labels and the data that names its Widget,
// which is all catalogEntryToWidget and the watch's predicate read.
func TestTrimCatalogEntry(t *testing.T) {
	w := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"}, Spec: v1.WidgetSpec{Image: "i", Size: ptr.To[int32](2)}}
	cm := &corev1.ConfigMap{}
	if err := decodeInto(desiredCatalogEntry(w, "op"), cm); err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{"a": "b"}
	cm.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply}}
	out, err := TrimCatalogEntry()(cm)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.ConfigMap)
	if want := map[string]string{"namespace": "ns", "name": "w"}; !equality.Semantic.DeepEqual(got.Data, want) {
		t.Errorf("data %v, want %v", got.Data, want)
	}
	if got.Labels[CatalogLabel] != "true" || got.Annotations != nil || got.ManagedFields != nil {
		t.Errorf("labels %v, annotations %v, managedFields %v after the transform", got.Labels, got.Annotations, got.ManagedFields)
	}
	if reqs := catalogEntryToWidget(context.Background(), got); len(reqs) != 1 || reqs[0].Namespace != "ns" || reqs[0].Name != "w" {
		t.Errorf("the trimmed entry maps to %v, want ns/w", reqs)
	}
	if out, err := TrimCatalogEntry()("not an object"); err != nil || out != "not an object" {
		t.Errorf("a non-object: %v, %v", out, err)
	}
}

package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
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
// (name, resourceVersion, generation, finalizers, deletion) and drops labels, annotations,
// managedFields and the UID.
func TestTrimWatchedWidget(t *testing.T) {
	now := metav1.Now()
	in := widgetMetadata("v1")
	in.ObjectMeta = metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u", ResourceVersion: "7", Generation: 3,
		Labels: map[string]string{"team": "a"}, Finalizers: []string{Finalizer}, DeletionTimestamp: &now,
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{…}", "widgetry.io/conversion-data": "{…}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}}
	want := in.DeepCopy()
	want.Labels, want.Annotations, want.ManagedFields, want.UID = nil, nil, nil, ""

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

// TestTrimCatalogEntry: a catalog entry keeps the shared catalog labels, and data only when
// its name is a hash: its Widget is read back from its name or that data, which is all
// catalogEntryToWidget and the watch's predicate read.
func TestTrimCatalogEntry(t *testing.T) {
	long := strings.Repeat("n", 250)
	for _, tc := range []struct {
		namespace, name string
		wantData        map[string]string
	}{
		{"ns", "w.with.dots", nil},
		{"ns", long, map[string]string{"namespace": "ns", "name": long}},
	} {
		w := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: tc.name, UID: "u"}, Spec: v1.WidgetSpec{Image: "i", Size: ptr.To[int32](2)}}
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
		if !equality.Semantic.DeepEqual(got.Data, tc.wantData) {
			t.Errorf("%s: data %v, want %v", cm.Name, got.Data, tc.wantData)
		}
		if got.Labels[CatalogLabel] != "true" || len(got.Labels) != 1 || got.Annotations != nil || got.ManagedFields != nil {
			t.Errorf("%s: labels %v, annotations %v, managedFields %v after the transform", cm.Name, got.Labels, got.Annotations, got.ManagedFields)
		}
		if reqs := catalogEntryToWidget(context.Background(), got); len(reqs) != 1 || reqs[0].Namespace != tc.namespace || reqs[0].Name != tc.name {
			t.Errorf("%s: the trimmed entry maps to %v, want %s/%s", cm.Name, reqs, tc.namespace, tc.name)
		}
	}
	// The pause marker, or any other ConfigMap of the label: no catalog label, nothing to map.
	marker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "op", Name: PausedConfigMap, Labels: map[string]string{ManagedByLabel: ManagedByValue}}, Data: map[string]string{"by": "me"}}
	out, _ := TrimCatalogEntry()(marker)
	if got := out.(*corev1.ConfigMap); got.Labels != nil || got.Data != nil || catalogEntryToWidget(context.Background(), got) != nil {
		t.Errorf("the pause marker after the transform: labels %v, data %v, maps to %v", got.Labels, got.Data, catalogEntryToWidget(context.Background(), got))
	}
	if out, err := TrimCatalogEntry()("not an object"); err != nil || out != "not an object" {
		t.Errorf("a non-object: %v, %v", out, err)
	}
}

// parseCatalogEntryName reads back exactly the names CatalogEntryName spells out.
func TestParseCatalogEntryName(t *testing.T) {
	for _, tc := range []struct {
		entry, namespace, name string
		ok                     bool
	}{
		{CatalogEntryName("ns", "w"), "ns", "w", true},
		{CatalogEntryName("team-a", "w.x.y"), "team-a", "w.x.y", true},
		{CatalogEntryName("ns", strings.Repeat("n", 250)), "", "", false}, // a hash
		{PausedConfigMap, "", "", false},
		{"widget.", "", "", false},
		{"widget.ns", "", "", false},
		{"widget.ns.", "", "", false},
		{"widget..w", "", "", false},
	} {
		ns, name, ok := parseCatalogEntryName(tc.entry)
		if ns != tc.namespace || name != tc.name || ok != tc.ok {
			t.Errorf("parseCatalogEntryName(%q) = %q, %q, %v; want %q, %q, %v", tc.entry, ns, name, ok, tc.namespace, tc.name, tc.ok)
		}
	}
}

// TestCompactMeta: after the transforms, what objects repeat is one copy (the namespace, an
// owner's API version and kind, the flags, the controller's finalizer), and nothing the
// controller reads has changed.
func TestCompactMeta(t *testing.T) {
	child := func() *metav1.PartialObjectMetadata {
		// Strings built at run time, as a decoder builds them: no two share memory.
		name, ns := strings.Clone("w"), strings.Clone("fleet")
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "u",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: strings.Clone("widgetry.io/v1"), Kind: strings.Clone("Widget"), Name: strings.Clone("w"), UID: "wu",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}}}
	}
	want := child()
	a, b := child(), child()
	for _, o := range []*metav1.PartialObjectMetadata{a, b} {
		if _, err := TrimChild()(o); err != nil {
			t.Fatal(err)
		}
	}
	if !equality.Semantic.DeepEqual(a, want) {
		t.Errorf("the trimmed child differs: %+v, want %+v", a.ObjectMeta, want.ObjectMeta)
	}
	ra, rb := a.OwnerReferences[0], b.OwnerReferences[0]
	// Whether two strings share their bytes: the point of the interning.
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) } //nolint:gosec // compares addresses, reads nothing
	if !same(a.Namespace, b.Namespace) || !same(ra.APIVersion, rb.APIVersion) || !same(ra.Kind, rb.Kind) || !same(ra.Name, a.Name) ||
		ra.Controller != rb.Controller || ra.BlockOwnerDeletion != rb.BlockOwnerDeletion {
		t.Error("two trimmed children repeat what they could share")
	}
	w := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "w", Finalizers: []string{strings.Clone(Finalizer)}}}
	if _, err := TrimWatchedWidget()(w); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.Finalizers, []string{Finalizer}) || &w.Finalizers[0] != &widgetFinalizers[0] {
		t.Errorf("a Widget's finalizers %v not the shared slice", w.Finalizers)
	}
	other := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "w", Finalizers: []string{"x", Finalizer}}}
	if _, err := TrimWatchedWidget()(other); err != nil || !slices.Equal(other.Finalizers, []string{"x", Finalizer}) {
		t.Errorf("other finalizers changed: %v, %v", other.Finalizers, err)
	}
}

// TestFleetInformer: the informers that hold an object per Widget keep no namespace index;
// every other informer keeps controller-runtime's.
func TestFleetInformer(t *testing.T) {
	indexers := toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}
	for _, tc := range []struct {
		obj     runtime.Object
		indexed bool
	}{
		{widgetMetadata("v1"), false},
		{childMetadata("apps/v1", "Deployment"), false},
		{&corev1.ConfigMap{}, false},
		{&corev1.Secret{}, true},
	} {
		inf := fleetInformer(&toolscache.ListWatch{}, tc.obj, 0, indexers)
		if _, indexed := inf.GetIndexer().GetIndexers()[toolscache.NamespaceIndex]; indexed != tc.indexed {
			t.Errorf("%T: namespace index %v, want %v", tc.obj, indexed, tc.indexed)
		}
	}
	if _, ok := indexers[toolscache.NamespaceIndex]; !ok {
		t.Error("the caller's indexers changed")
	}
}

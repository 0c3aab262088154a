package controller

import (
	"maps"
	"slices"
	"time"
	"unique"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/crd"
)

// The controller's cache holds, for every Widget in the cluster, the Widget, its Deployment,
// its Service and its catalog entry: memory times everything the operator manages, in a pod
// whose default limit is 256Mi. So it caches only what the controller reads from it:
//
//   - Widgets: metadata only (the watch that triggers reconciles), without labels,
//     annotations and managedFields. Reconcile reads the Widget itself past the cache
//     (APIReader).
//   - Deployments and Services: metadata only, of the objects labelled as managed by this
//     operator (the label selector is the apiserver's: the cached copies need not keep the
//     labels). The controller reads their owner references, UID and resourceVersion to decide
//     and condition its writes, and whether their managedFields need an upgrade (TrimChild);
//     what it knows of their spec and status comes from the answer to its own apply.
//   - Catalog entries and the pause marker: ConfigMaps of its namespace with its label,
//     without their data: an entry's name names its Widget (TrimCatalogEntry).
//   - The Widget CRD, by name, for the storage version.
//
// What every cached object repeats is shared (compactMeta), and the fleet's informers keep no
// namespace index (fleetInformer).
//
// A typed Get of a Deployment or a Service through the cached client would start a second,
// full informer for every managed object: read children as metav1.PartialObjectMetadata
// (childMetadata).

// CacheOptions is the controller manager's cache for a controller whose catalog lives in
// catalogNamespace.
func CacheOptions(catalogNamespace string) cache.Options {
	managed := labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedByValue})
	child := cache.ByObject{Label: managed, Transform: TrimChild()}
	return cache.Options{
		NewInformer: fleetInformer,
		// Every type without an entry below: the Widgets.
		DefaultTransform: TrimWatchedWidget(),
		ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}: child,
			&corev1.Service{}:    child,
			&corev1.ConfigMap{}: {
				Namespaces: map[string]cache.Config{catalogNamespace: {}},
				Label:      managed,
				Transform:  TrimCatalogEntry(),
			},
			&apiextensionsv1.CustomResourceDefinition{}: {
				Field:     fields.OneTermEqualSelector("metadata.name", crd.WidgetName),
				Transform: cache.TransformStripManagedFields(),
			},
		},
	}
}

// fleetInformer is controller-runtime's informer, without the namespace index for the
// informers that hold an object per Widget (metadata-only Widgets, Deployments and Services;
// catalog entries). The controller never lists them from the cache: it reads each by name.
// The index is a set entry per object, about 6% of the controller's heap at 10,000 Widgets (a
// heap profile of BenchmarkControllerRestartAtScale). A List of them with client.InNamespace
// through the cache fails ("index with name namespace does not exist"); lists of every
// namespace still work.
func fleetInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	switch obj.(type) {
	case *metav1.PartialObjectMetadata, *corev1.ConfigMap:
		indexers = maps.Clone(indexers)
		delete(indexers, toolscache.NamespaceIndex)
	}
	return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
}

// widgetMetadata is the object of the controller's Widget watch for a version: metadata only.
func widgetMetadata(version string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(schema.GroupVersionKind{Group: v1.GroupVersion.Group, Version: version, Kind: "Widget"})
	return m
}

// childMetadata is an empty metadata-only object of a child's kind, for reads through the
// cache.
func childMetadata(apiVersion, kind string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, kind))
	return m
}

// TrimWatchedWidget drops what the Widget watch never reads: labels, annotations (a
// last-applied-configuration or the conversion-data annotation can be the largest part of a
// Widget's metadata), managedFields and the UID (the reconcile reads the Widget itself past
// the cache). A change to any of them still sends an event.
func TrimWatchedWidget() toolscache.TransformFunc {
	return func(in any) (any, error) {
		obj, err := meta.Accessor(in)
		if err != nil {
			return in, nil //nolint:nilerr // not an object (a tombstone): cached as it is
		}
		dropLabelsAndAnnotations(obj)
		if obj.GetManagedFields() != nil {
			obj.SetManagedFields(nil)
		}
		compactMeta(obj)
		obj.SetUID("") // nothing reads it: reconciles read the Widget past the cache
		if f := obj.GetFinalizers(); slices.Equal(f, widgetFinalizers) {
			obj.SetFinalizers(widgetFinalizers)
		}
		return in, nil
	}
}

// dropLabelsAndAnnotations empties both maps. With 10,000 Widgets, each child's four labels
// and a Deployment's revision annotation are about a fifth of the cache's heap.
func dropLabelsAndAnnotations(obj metav1.Object) {
	// Nil checks first: setting an already nil field would allocate (kubernetes#124337).
	if obj.GetLabels() != nil {
		obj.SetLabels(nil)
	}
	if obj.GetAnnotations() != nil {
		obj.SetAnnotations(nil)
	}
}

// TrimCatalogEntry keeps of a cached ConfigMap what the controller reads: whether it carries
// the catalog label (the watch's predicate) and, for the pause marker, that it exists. An
// entry's Widget is read back from its name (parseCatalogEntryName); only an entry whose name is
// a hash (a namespace and name too long to spell out) keeps the data that names its Widget.
// A change to what is dropped still sends an event, and the reconcile that follows applies
// the whole entry again.
//
// Every catalog entry of the cache shares one labels map. The data kept per entry was about a
// tenth of the controller's heap at 10,000 Widgets (a heap profile), and each entry's labels
// were a map of the same size. Cached objects are read only (the cache hands out deep
// copies; the event handlers do not write).
func TrimCatalogEntry() toolscache.TransformFunc {
	return func(in any) (any, error) {
		cm, ok := in.(*corev1.ConfigMap)
		if !ok {
			return in, nil // a tombstone: cached as it is
		}
		compactMeta(cm)
		cm.UID, cm.ManagedFields, cm.Annotations, cm.BinaryData = "", nil, nil, nil
		if cm.Labels[CatalogLabel] == "true" {
			cm.Labels = catalogLabels
		} else {
			cm.Labels = nil
		}
		_, _, spelled := parseCatalogEntryName(cm.Name)
		if namespace, name := cm.Data["namespace"], cm.Data["name"]; spelled || namespace == "" || name == "" {
			cm.Data = nil
		} else {
			cm.Data = map[string]string{"namespace": namespace, "name": name}
		}
		return in, nil
	}
}

// catalogLabels is what the cache keeps of a catalog entry's labels, one map for all.
var catalogLabels = map[string]string{CatalogLabel: "true"}

// compactMeta shrinks what every cached object of the fleet repeats: its namespace, and its
// owner references' API version, kind and flags, become one shared copy each; an owner
// reference's name shares the object's own when they are equal (a child has its Widget's
// name). A few dozen bytes an object, four objects a Widget.
func compactMeta(obj metav1.Object) {
	if ns := obj.GetNamespace(); ns != "" {
		obj.SetNamespace(unique.Make(ns).Value())
	}
	refs := obj.GetOwnerReferences()
	for i := range refs {
		r := &refs[i]
		r.APIVersion, r.Kind = unique.Make(r.APIVersion).Value(), unique.Make(r.Kind).Value()
		if r.Name == obj.GetName() {
			r.Name = obj.GetName()
		}
		r.Controller, r.BlockOwnerDeletion = sharedBool(r.Controller), sharedBool(r.BlockOwnerDeletion)
	}
}

var (
	sharedTrue  = ptr.To(true)
	sharedFalse = ptr.To(false)
)

// sharedBool is b as one of two shared pointers.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return sharedTrue
	default:
		return sharedFalse
	}
}

// widgetFinalizers is what the cache keeps of a Widget's finalizers when they are the
// controller's alone, one slice for all.
var widgetFinalizers = []string{Finalizer}

// TrimChild drops from a cached child its labels and annotations, which the controller never
// reads from the cache, and its managedFields — often the largest part of its metadata. The
// controller reads those for one thing: a child that still has fields
// recorded under its Update operation must have them handed over to its apply
// (upgradeManagedFields). writeChild does that right after it creates a child; a child left
// in that state (created by an older version, or the upgrade failed) keeps in the cache that
// entry alone, without its fields, as a marker, and writeChild reads the fields from the
// apiserver when it sees it. Writes are unaffected: an update that carries no managedFields
// leaves the stored ones as they are.
func TrimChild() toolscache.TransformFunc {
	return func(in any) (any, error) {
		obj, err := meta.Accessor(in)
		if err != nil {
			return in, nil //nolint:nilerr // not an object (a tombstone): cached as it is
		}
		dropLabelsAndAnnotations(obj)
		compactMeta(obj)
		switch {
		case obj.GetManagedFields() == nil:
		case needsUpgrade(obj):
			obj.SetManagedFields([]metav1.ManagedFieldsEntry{upgradeMarker})
		default:
			obj.SetManagedFields(nil)
		}
		return in, nil
	}
}

// upgradeMarker is what the cache keeps of a child's managedFields while they need an upgrade.
var upgradeMarker = metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}

// needsUpgrade: obj has fields recorded under the controller's Update operation.
func needsUpgrade(obj metav1.Object) bool {
	for _, e := range obj.GetManagedFields() {
		if e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationUpdate {
			return true
		}
	}
	return false
}

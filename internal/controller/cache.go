package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
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
//   - Catalog entries and the pause marker: ConfigMaps of its namespace with its label, with
//     only the data that names the Widget (TrimCatalogEntry).
//   - The Widget CRD, by name, for the storage version.
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
// Widget's metadata) and managedFields. A change to any of them still sends an event.
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

// TrimCatalogEntry keeps of a cached ConfigMap what the controller reads: its labels (the
// catalog label), the data that names an entry's Widget (catalogEntryToWidget) and, for the
// pause marker, that it exists. A change to what is dropped still sends an event, and the
// reconcile that follows applies the whole entry again.
func TrimCatalogEntry() toolscache.TransformFunc {
	return func(in any) (any, error) {
		cm, ok := in.(*corev1.ConfigMap)
		if !ok {
			return in, nil // a tombstone: cached as it is
		}
		cm.ManagedFields, cm.Annotations, cm.BinaryData = nil, nil, nil
		if len(cm.Data) > 0 {
			kept := map[string]string{}
			for _, k := range []string{"namespace", "name"} {
				if v, ok := cm.Data[k]; ok {
					kept[k] = v
				}
			}
			cm.Data = kept
		}
		return in, nil
	}
}

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

package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// StripManagedFields is the controller's cache transform: it drops managedFields from every
// object it caches — often the largest part of a Widget, a Deployment or a Service, and
// memory times every object in the cluster — except from a child that still has fields
// recorded under this controller's Update operation (one it created, or an older version
// wrote). The controller reads managedFields only to hand those fields over to its apply
// (upgradeManagedFields); the JSON patch that does so replaces the whole list, so it must see
// the whole list, and a child without such an entry needs none of it. Writes are unaffected:
// an update that carries no managedFields leaves the stored ones as they are.
func StripManagedFields() toolscache.TransformFunc {
	return func(in any) (any, error) {
		obj, err := meta.Accessor(in)
		if err != nil || obj.GetManagedFields() == nil {
			return in, nil //nolint:nilerr // not an object (a tombstone): cached as it is
		}
		for _, e := range obj.GetManagedFields() {
			if e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationUpdate {
				return in, nil
			}
		}
		obj.SetManagedFields(nil)
		return in, nil
	}
}

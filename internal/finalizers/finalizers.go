// Package finalizers removes a finalizer from every object of a CRD: what the chart's
// pre-delete hook does on uninstall (widgetctl cleanup-finalizers). The apiserver deletes an
// object only once its finalizers are gone; with no controller left to remove them, deleting
// a Widget, or a namespace holding one, would hang in Terminating forever.
//
// Objects are listed and patched through the CRD's storage version with the metadata client,
// so no conversion webhook is needed, and every patch carries the object's resourceVersion.
package finalizers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/metalist"
)

// RemoveFromAll removes finalizer from every object of CRD crdName in all namespaces, with
// metadata-only merge patches that carry the object's resourceVersion (a concurrent writer's
// change is re-read, never overwritten). It returns how many objects it changed.
func RemoveFromAll(ctx context.Context, c client.Reader, md metadata.Interface, crdName, finalizer string) (int, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("read CRD %s: %w", crdName, err)
	}
	version, _ := apihelpers.GetCRDStorageVersion(live)
	res := md.Resource(schema.GroupVersionResource{Group: live.Spec.Group, Version: version, Resource: live.Spec.Names.Plural})
	removed := 0
	err := metalist.Each(ctx, res, func(item *metav1.PartialObjectMetadata) error {
		if !slices.Contains(item.Finalizers, finalizer) {
			return nil
		}
		if err := removeOne(ctx, res, item.Namespace, item.Name, finalizer); err != nil {
			return err
		}
		removed++
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("remove finalizer %s from %s: %w", finalizer, live.Spec.Names.Plural, err)
	}
	return removed, nil
}

func removeOne(ctx context.Context, res metadata.Getter, ns, name, finalizer string) error {
	// Another writer (the controller, a user) may change the object between the GET and the
	// PATCH; the resourceVersion in the patch turns that into a conflict, retried on a
	// fresh read.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := res.Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if !slices.Contains(obj.Finalizers, finalizer) {
			return nil
		}
		remaining := slices.DeleteFunc(slices.Clone(obj.Finalizers), func(f string) bool { return f == finalizer })
		if remaining == nil {
			remaining = []string{}
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.ResourceVersion, "finalizers": remaining}})
		if err != nil {
			return err
		}
		_, err = res.Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("remove finalizer %s from %s/%s: %w", finalizer, ns, name, err)
	}
	return nil
}

// Package finalizers removes a finalizer from every object of a CRD: what the chart's
// pre-delete hook does on uninstall, so that with no controller left, deleting a Widget or
// its namespace later does not hang in Terminating (seed 000).
package finalizers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// conflictRetries bounds re-reads of an object another writer changed meanwhile.
const conflictRetries = 5

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
	version := ""
	for _, v := range live.Spec.Versions {
		if v.Storage {
			version = v.Name
		}
	}
	res := md.Resource(schema.GroupVersionResource{Group: live.Spec.Group, Version: version, Resource: live.Spec.Names.Plural})
	removed, cont := 0, ""
	for {
		list, err := res.List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return removed, fmt.Errorf("list %s: %w", live.Spec.Names.Plural, err)
		}
		for _, item := range list.Items {
			if !slices.Contains(item.Finalizers, finalizer) {
				continue
			}
			if err := removeOne(ctx, res, item.Namespace, item.Name, finalizer); err != nil {
				return removed, err
			}
			removed++
		}
		if cont = list.Continue; cont == "" {
			return removed, nil
		}
	}
}

func removeOne(ctx context.Context, res metadata.Getter, ns, name, finalizer string) error {
	for attempt := 1; ; attempt++ {
		obj, err := res.Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get %s/%s: %w", ns, name, err)
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
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err) && attempt < conflictRetries:
			continue
		}
		return fmt.Errorf("remove finalizer %s from %s/%s: %w", finalizer, ns, name, err)
	}
}

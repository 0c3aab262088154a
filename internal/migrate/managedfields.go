package migrate

import (
	"context"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/metalist"
)

// DropManagedFields removes, from every object of CRD crdName, the managedFields entries
// recorded in version (e.g. "v1alpha1"), which must not be served (else clients record new
// ones behind it). The chart's post-upgrade hook runs it at unserve (widgetctl migrate
// --drop-managed-fields-of), and the preflight of remove wants none left: the apiserver
// converts managedFields entries through their recorded version on every server-side apply,
// so once the version is gone from the CRD, applies to objects that keep such an entry fail
// (kubernetes#111937; Cluster API's crdmigrator does the same cleanup). Each write carries the
// object's resourceVersion; Conflict and NotFound are counted (the next run catches a
// conflicting object), other errors too. Objects without such entries are not written.
func (m *Migrator) DropManagedFields(ctx context.Context, crdName, version string) (Counts, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := m.c.Get(ctx, client.ObjectKey{Name: crdName}, crd); err != nil {
		return Counts{}, fmt.Errorf("read CRD %s: %w", crdName, err)
	}
	apiVersion := crd.Spec.Group + "/" + version
	var reqVersion string
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Served {
			return Counts{}, refusef("CRD %s still serves %s, so clients would record new managedFields entries through it: stop serving it first (stage unserve)", crdName, version)
		}
	}
	for _, v := range crd.Spec.Versions {
		if v.Served && (reqVersion == "" || v.Storage) {
			reqVersion = v.Name
		}
	}
	if reqVersion == "" {
		return Counts{}, refusef("CRD %s serves no version, so its objects cannot be read", crdName)
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: reqVersion, Resource: crd.Spec.Names.Plural}
	res := m.meta.Resource(gvr)
	var counts Counts
	var firstErr error
	// Every object is patched at most once and a dropped entry stays dropped, so the full
	// LIST the pager falls back to after a 410 Gone is safe.
	err := metalist.Each(ctx, res, func(o *metav1.PartialObjectMetadata) error {
		kept := make([]metav1.ManagedFieldsEntry, 0, len(o.ManagedFields))
		for _, e := range o.ManagedFields {
			if e.APIVersion != apiVersion {
				kept = append(kept, e)
			}
		}
		if len(kept) == len(o.ManagedFields) {
			return nil
		}
		var mf any = kept
		if len(kept) == 0 {
			// An empty list in a patch means "leave managedFields alone"; a single empty
			// entry means "reset them".
			mf = []map[string]any{{}}
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": o.ResourceVersion, "managedFields": mf}})
		if err != nil {
			return err
		}
		_, err = res.Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			counts.Migrated++
		case apierrors.IsConflict(err):
			counts.Conflict++
		case apierrors.IsNotFound(err):
			counts.NotFound++
		default:
			counts.Error++
			if firstErr == nil {
				firstErr = fmt.Errorf("drop %s managedFields of %s %s: %w", apiVersion, gvr.GroupResource(), objectKey(o.Namespace, o.Name), err)
			}
		}
		return nil
	})
	if err != nil {
		return counts, fmt.Errorf("list %s: %w", gvr.GroupResource(), err)
	}
	if firstErr != nil {
		return counts, fmt.Errorf("%d objects kept managedFields of %s (first: %w); rerun", counts.Error, apiVersion, firstErr)
	}
	return counts, nil
}

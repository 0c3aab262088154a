package migrate

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TrimExpectation is what the CRD looked like when the migration started.
type TrimExpectation struct {
	// StorageVersion the objects were re-encoded in.
	StorageVersion string
	// Generation of the CRD. Any spec change bumps it, including a storage flip and back
	// (v1 -> v1alpha1 -> v1), which storedVersions alone would not show: objects written in
	// between are in the other encoding.
	Generation int64
	// StoredVersionsAtStart is status.storedVersions at the start; a version that appears
	// in it later means someone stored objects in it during the run (cmctl's check).
	StoredVersionsAtStart []string
}

// trimConflictRetries bounds re-reads when the CRD changes between our read and our write
// in ways the checks allow (labels, annotations, conditions).
const trimConflictRetries = 5

// TrimStoredVersions sets status.storedVersions of CRD crdName to [want.StorageVersion],
// after re-reading the CRD and refusing (a *RefusedError, nothing changed) if its storage
// version or generation changed, or a stored version appeared, since the migration started.
// The write carries the resourceVersion that was checked (optimistic lock), so a concurrent
// change makes it re-read and check again. It returns the stored versions it leaves.
func TrimStoredVersions(ctx context.Context, c client.Client, crdName string, want TrimExpectation) ([]string, error) {
	for attempt := 1; ; attempt++ {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: crdName}, crd); err != nil {
			return nil, fmt.Errorf("trim storedVersions: re-read CRD %s: %w", crdName, err)
		}
		if err := checkTrim(crd, want); err != nil {
			return crd.Status.StoredVersions, err
		}
		if slices.Equal(crd.Status.StoredVersions, []string{want.StorageVersion}) {
			return crd.Status.StoredVersions, nil
		}
		crd.Status.StoredVersions = []string{want.StorageVersion}
		err := c.Status().Update(ctx, crd)
		if err == nil {
			return crd.Status.StoredVersions, nil
		}
		if !apierrors.IsConflict(err) || attempt == trimConflictRetries {
			return nil, fmt.Errorf("trim storedVersions of CRD %s to [%s]: %w; the objects are migrated, rerun to trim", crdName, want.StorageVersion, err)
		}
	}
}

func checkTrim(crd *apiextensionsv1.CustomResourceDefinition, want TrimExpectation) error {
	rerun := fmt.Sprintf("storedVersions left as %v; rerun 'widgetctl migrate --crd %s' to migrate again under the new spec", crd.Status.StoredVersions, crd.Name)
	if got, _ := apihelpers.GetCRDStorageVersion(crd); got != want.StorageVersion {
		return refusef("not trimming: the storage version of CRD %s changed from %s to %s during the migration, so objects may be stored in either; %s",
			crd.Name, want.StorageVersion, got, rerun)
	}
	if crd.Generation != want.Generation {
		return refusef("not trimming: the spec of CRD %s changed during the migration (generation %d -> %d; the storage version may have moved and back); %s",
			crd.Name, want.Generation, crd.Generation, rerun)
	}
	for _, v := range crd.Status.StoredVersions {
		if v != want.StorageVersion && !slices.Contains(want.StoredVersionsAtStart, v) {
			return refusef("not trimming: version %s of CRD %s was stored during the migration (storedVersions %v, %v at the start); %s",
				v, crd.Name, crd.Status.StoredVersions, want.StoredVersionsAtStart, rerun)
		}
	}
	return nil
}

package upgrade

import (
	"context"
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
)

// HelmManaged reports whether Helm owns the CRD: then `upgrade apply` must not change it, or
// two owners of spec.versions would fight.
func HelmManaged(o *Observation) (release string, managed bool) {
	if o.live == nil {
		return "", false
	}
	if o.live.Labels["app.kubernetes.io/managed-by"] == "Helm" || o.live.Annotations["meta.helm.sh/release-name"] != "" {
		return o.live.Annotations["meta.helm.sh/release-name"], true
	}
	return "", false
}

// Apply makes the CRD change of one step, on the CRD as observed (optimistic lock: if the
// CRD changed since, the write fails and nothing changes).
func Apply(ctx context.Context, c client.Client, cfg Config, o *Observation, s Step) error {
	if o.live == nil {
		return &Refusal{Message: fmt.Sprintf("CRD %s is not installed", cfg.CRD), Next: "install the chart at stage " + string(s.To)}
	}
	if s.From == s.To && !s.Repair {
		return nil // the same stage: nothing to change
	}
	live := o.live.DeepCopy()
	if err := setStageFlags(live, cfg, s.To); err != nil {
		return err
	}
	if err := CheckVersionsKept(live); err != nil {
		return err
	}
	if err := c.Update(ctx, live); err != nil {
		if apierrors.IsConflict(err) {
			return &Refusal{Message: fmt.Sprintf("CRD %s changed since it was observed", cfg.CRD), Next: "observe again and retry (widgetctl upgrade status)"}
		}
		return fmt.Errorf("update CRD %s to stage %s: %w", cfg.CRD, s.To, err)
	}
	o.live = live
	return nil
}

// setStageFlags applies the stage table (crd.SetStageFlags) for cfg's version pair.
func setStageFlags(live *apiextensionsv1.CustomResourceDefinition, cfg Config, stage crd.Stage) error {
	err := crd.SetStageFlags(live, cfg.pair(), stage)
	if errors.Is(err, crd.ErrNoTemplate) {
		return &Refusal{Message: err.Error(), Next: "add the missing version (served: false, storage: false) with its schema to the CRD, then retry"}
	}
	return err
}

// CheckVersionsKept refuses a CRD whose spec.versions lacks a version still in
// status.storedVersions: objects may be stored in it, and without it they cannot be read or
// migrated (the apiserver rejects such an update too; this says why, and what to do, first).
func CheckVersionsKept(desired *apiextensionsv1.CustomResourceDefinition) error {
	for _, stored := range desired.Status.StoredVersions {
		if crd.Version(desired, stored) == nil {
			return &Refusal{
				Message: fmt.Sprintf("removing version %s from CRD %s refused: status.storedVersions %v still lists it, so objects may be stored as %s (the apiserver would reject the change as well)",
					stored, desired.Name, desired.Status.StoredVersions, stored),
				Next: fmt.Sprintf("migrate every object off %s and trim storedVersions first: widgetctl migrate --crd %s", stored, desired.Name),
			}
		}
	}
	return nil
}

package upgrade

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/fielddiff"
	"github.com/widgetry/widget-operator/internal/metalist"
)

// RoundTripReport is the result of RoundTrip.
type RoundTripReport struct {
	CRD            string         `json:"crd"`
	StorageVersion string         `json:"storageVersion"`
	Versions       []string       `json:"versions"`
	Objects        map[string]int `json:"objects"`
	// Changed counts objects written by someone else between the read and the dry run: not
	// judged; rerun to cover them.
	Changed int `json:"changed"`
	// Lossy are "version namespace/name: what changed" for every object a client of that
	// version would change by writing back exactly what it read.
	Lossy []string `json:"lossy,omitempty"`
}

// OK reports whether no object changed on its round trip.
func (r *RoundTripReport) OK() bool { return len(r.Lossy) == 0 }

// RoundTrip reads every object of the CRD through each served version and writes it back,
// unchanged, through the same version as a server-side dry run (dryRun=All: admission runs,
// nothing is stored). Through a version other than the storage version the apiserver converts
// the object to the storage version and back, with the live conversion webhook, so what a
// client of that version reads and writes back must come out as it went in:
//
//   - the answer, read through the same version, must equal the object read, field by field
//     (a missing list is not an empty one), resourceVersion and managedFields aside;
//   - its generation must not move: the apiserver bumps it when the spec it would store
//     differs from the one stored — a loss that the version's own view may not show (a field
//     only the storage version has, dropped on the way out and so on the way back).
func RoundTrip(ctx context.Context, c client.Client, crdName string) (*RoundTripReport, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, live); err != nil {
		return nil, fmt.Errorf("read CRD %s: %w", crdName, err)
	}
	r := &RoundTripReport{CRD: crdName, Objects: map[string]int{}}
	for _, v := range live.Spec.Versions {
		if v.Storage {
			r.StorageVersion = v.Name
		}
		if !v.Served {
			continue
		}
		r.Versions = append(r.Versions, v.Name)
		err := metalist.EachObject(ctx, c, live.Spec.Group+"/"+v.Name, live.Spec.Names.ListKind, func(o *unstructured.Unstructured) error {
			return r.roundTrip(ctx, c, v.Name, o)
		})
		if err != nil {
			return nil, fmt.Errorf("list %s through %s: %w", live.Spec.Names.Plural, v.Name, err)
		}
	}
	return r, nil
}

func (r *RoundTripReport) roundTrip(ctx context.Context, c client.Client, version string, read *unstructured.Unstructured) error {
	written := read.DeepCopy()
	err := c.Update(ctx, written, client.DryRunAll)
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		r.Changed++
		return nil
	case err != nil:
		r.Lossy = append(r.Lossy, fmt.Sprintf("%s %s: the dry-run write back was refused: %v", version, objectName(read), err))
		return nil
	}
	r.Objects[version]++
	if g, w := read.GetGeneration(), written.GetGeneration(); g != w {
		r.Lossy = append(r.Lossy, fmt.Sprintf("%s %s: writing back what was read would change the stored spec (generation %d -> %d)", version, objectName(read), g, w))
	}
	for _, d := range fielddiff.Diff(withoutWriteFields(read), withoutWriteFields(written)) {
		r.Lossy = append(r.Lossy, fmt.Sprintf("%s %s: %s", version, objectName(read), d))
	}
	return nil
}

// withoutWriteFields is an object without what every write moves.
func withoutWriteFields(o *unstructured.Unstructured) map[string]any {
	c := o.DeepCopy()
	for _, f := range []string{"resourceVersion", "managedFields", "generation"} {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	return c.Object
}

func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

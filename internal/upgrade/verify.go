package upgrade

import (
	"context"
	"fmt"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/metalist"
)

// VerifyReport is the result of Verify.
type VerifyReport struct {
	CRD      string         `json:"crd"`
	Versions []string       `json:"versions"`
	Objects  map[string]int `json:"objects"`
	// Changed counts objects written between the reads (different resourceVersions): not
	// compared; rerun to cover them.
	Changed    int      `json:"changed"`
	Mismatches []string `json:"mismatches,omitempty"`
}

// OK reports whether every object read the same through every served version.
func (r *VerifyReport) OK() bool { return len(r.Mismatches) == 0 }

// Verify reads every object of the CRD through every served version and checks that each
// version returns the same objects, and, when cfg.CompareVersions is set, that their content
// agrees across versions (for Widgets: the conversion round trip).
func Verify(ctx context.Context, c client.Client, cfg Config) (*VerifyReport, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: cfg.CRD}, live); err != nil {
		return nil, fmt.Errorf("read CRD %s: %w", cfg.CRD, err)
	}
	r := &VerifyReport{CRD: cfg.CRD, Objects: map[string]int{}}
	byUID := map[string]map[string]*unstructured.Unstructured{}
	// Every version is read at the first LIST's resourceVersion: objects written meanwhile
	// would otherwise show as missing from one version.
	snapshot := ""
	for _, v := range live.Spec.Versions {
		if !v.Served {
			continue
		}
		r.Versions = append(r.Versions, v.Name)
		rv, err := metalist.EachObjectAt(ctx, c, live.Spec.Group+"/"+v.Name, live.Spec.Names.ListKind, snapshot, func(item *unstructured.Unstructured) error {
			uid := string(item.GetUID())
			if byUID[uid] == nil {
				byUID[uid] = map[string]*unstructured.Unstructured{}
			}
			byUID[uid][v.Name] = item
			r.Objects[v.Name]++
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list %s through %s: %w", live.Spec.Names.Plural, v.Name, err)
		}
		if snapshot == "" {
			snapshot = rv
		}
	}
	uids := make([]string, 0, len(byUID))
	for uid := range byUID {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		objs := byUID[uid]
		var first *unstructured.Unstructured
		rv := ""
		same := true
		for _, o := range objs {
			first = o
			if rv == "" {
				rv = o.GetResourceVersion()
			} else if o.GetResourceVersion() != rv {
				same = false
			}
		}
		name := first.GetNamespace() + "/" + first.GetName()
		if !same {
			r.Changed++
			continue
		}
		if len(objs) != len(r.Versions) {
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("%s is listed through %d of the %d served versions", name, len(objs), len(r.Versions)))
			continue
		}
		if cfg.CompareVersions != nil {
			if err := cfg.CompareVersions(objs); err != nil {
				r.Mismatches = append(r.Mismatches, fmt.Sprintf("%s: %v", name, err))
			}
		}
	}
	return r, nil
}

package crd

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

func TestGeneratedCRD(t *testing.T) {
	c := Widget()
	if c.Name != WidgetName || c.Spec.Names.ShortNames[0] != "wgt" || c.Spec.Scope != "Namespaced" {
		t.Fatalf("unexpected names: %s %+v %s", c.Name, c.Spec.Names, c.Spec.Scope)
	}
	alpha, hub := Version(c, "v1alpha1"), Version(c, "v1")
	if alpha == nil || hub == nil || !alpha.Storage || hub.Storage {
		t.Fatalf("want v1alpha1 (storage) and v1: %+v", c.Spec.Versions)
	}
	// The webhook passes status through as raw JSON, which is only right while both versions
	// declare the same status schema.
	as, hs := alpha.Schema.OpenAPIV3Schema.Properties["status"], hub.Schema.OpenAPIV3Schema.Properties["status"]
	if !equality.Semantic.DeepEqual(as, hs) {
		t.Fatal("status schemas of v1alpha1 and v1 differ; the conversion webhook copies status verbatim")
	}
	for _, v := range []string{"v1alpha1", "v1"} {
		ver := Version(c, v)
		if ver.Subresources == nil || ver.Subresources.Status == nil || ver.Subresources.Scale == nil {
			t.Errorf("%s lacks the status or scale subresource", v)
		}
	}
	if err := SetStorageVersion(c, "v1"); err != nil || !Version(c, "v1").Storage || Version(c, "v1alpha1").Storage {
		t.Errorf("SetStorageVersion(v1): %v", err)
	}
	if err := SetStorageVersion(c, "v2"); err == nil {
		t.Error("SetStorageVersion accepted an unknown version")
	}
	if !Widget().Spec.Versions[1].Storage {
		t.Error("Widget() returned a shared copy")
	}
}

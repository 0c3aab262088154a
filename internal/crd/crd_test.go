package crd

import (
	"errors"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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

// TestSetStageFlagsFromEveryStage: moving a CRD at any stage to any other gives the versions
// the target stage has from the generated CRD, in the same order — remove drops the old
// version and the way back from remove adds it again from the template.
func TestSetStageFlagsFromEveryStage(t *testing.T) {
	want := map[Stage][]string{
		StageInitial: {"v1alpha1"}, StageAddVersion: {"v1alpha1", "v1"}, StageFlipStorage: {"v1alpha1", "v1"},
		StageMigrate: {"v1alpha1", "v1"}, StageUnserve: {"v1alpha1", "v1"}, StageRemove: {"v1"},
	}
	for _, from := range Stages {
		for _, to := range Stages {
			start := Widget()
			if err := ApplyStageFlags(start, from); err != nil {
				t.Fatalf("%s: %v", from, err)
			}
			got, direct := start.DeepCopy(), Widget()
			if err := ApplyStageFlags(got, to); err != nil {
				t.Fatalf("%s -> %s: %v", from, to, err)
			}
			if err := ApplyStageFlags(direct, to); err != nil {
				t.Fatalf("%s: %v", to, err)
			}
			byName := func(c *apiextensionsv1.CustomResourceDefinition) map[string]apiextensionsv1.CustomResourceDefinitionVersion {
				m := map[string]apiextensionsv1.CustomResourceDefinitionVersion{}
				for _, v := range c.Spec.Versions {
					m[v.Name] = v
				}
				return m
			}
			var names []string
			for _, v := range got.Spec.Versions {
				names = append(names, v.Name)
			}
			slices.Sort(names)
			if wantNames := slices.Sorted(slices.Values(want[to])); !slices.Equal(names, wantNames) {
				t.Errorf("%s -> %s: versions %v, want %v", from, to, names, wantNames)
			}
			if !equality.Semantic.DeepEqual(byName(got), byName(direct)) {
				t.Errorf("%s -> %s: versions differ from %s applied to the generated CRD", from, to, to)
			}
		}
	}
	if v := Version(func() *apiextensionsv1.CustomResourceDefinition {
		c := Widget()
		_ = ApplyStageFlags(c, StageRemove)
		return c
	}(), "v1"); v == nil || !v.Served || !v.Storage {
		t.Errorf("at remove v1 must be served and stored: %+v", v)
	}
	noTemplate := WidgetPair()
	noTemplate.Template = nil
	c := Widget()
	_ = ApplyStageFlags(c, StageRemove)
	if err := SetStageFlags(c, noTemplate, StageUnserve); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("back from remove without a template: %v, want ErrNoTemplate", err)
	}
	initial := Widget()
	_ = ApplyStageFlags(initial, StageInitial)
	if err := SetStageFlags(initial, noTemplate, StageRemove); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("to remove from a CRD without v1 and no template: %v, want ErrNoTemplate", err)
	}
}

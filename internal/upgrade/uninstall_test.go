package upgrade

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/widgetry/widget-operator/internal/crd"
)

func TestCheckUninstall(t *testing.T) {
	for _, tc := range []struct {
		stage  crd.Stage
		refuse bool
	}{{crd.StageInitial, false}, {crd.StageAddVersion, true}, {crd.StageFlipStorage, true}, {crd.StageMigrate, true}, {crd.StageUnserve, false}} {
		err := CheckUninstall(widgetAt(t, tc.stage, "v1"))
		if tc.refuse != (err != nil) {
			t.Errorf("%s: %v, want refused=%v", tc.stage, err, tc.refuse)
		}
		if err != nil && (!IsRefusal(err) || !strings.Contains(err.Error(), "allowUnsafeUninstall=true") || !strings.Contains(err.Error(), "runbooks/upgrade/unserve.md")) {
			t.Errorf("%s: the refusal does not name the way out: %v", tc.stage, err)
		}
	}
	if err := CheckUninstall(nil); err != nil {
		t.Errorf("no CRD: %v", err)
	}
	none := widgetAt(t, crd.StageMigrate, "v1")
	none.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	if err := CheckUninstall(none); err != nil {
		t.Errorf("conversion None (nothing to lose with the release): %v", err)
	}
}

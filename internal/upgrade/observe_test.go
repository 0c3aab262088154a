package upgrade

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/widgetry/widget-operator/internal/crd"
)

// widgetAt returns the Widget CRD at stage with storedVersions, Established, converting
// through a webhook.
func widgetAt(t *testing.T, stage crd.Stage, stored ...string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	c := crd.WithWebhookConversion(crd.Widget(), apiextensionsv1.WebhookClientConfig{URL: ptr("https://127.0.0.1:1/convert")})
	if err := crd.ApplyStageFlags(c, stage); err != nil {
		t.Fatal(err)
	}
	c.Status.StoredVersions = stored
	c.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	return c
}

func ptr[T any](v T) *T { return &v }

func TestObserveDerivesTheStageTable(t *testing.T) {
	cfg := WidgetConfig()
	for _, tc := range []struct {
		name       string
		crd        *apiextensionsv1.CustomResourceDefinition
		want       crd.Stage
		rolledBack bool
		bad        string
	}{
		{"initial", widgetAt(t, crd.StageInitial, "v1alpha1"), crd.StageInitial, false, ""},
		{"add-version", widgetAt(t, crd.StageAddVersion, "v1alpha1"), crd.StageAddVersion, false, ""},
		{"add-version after a rollback", widgetAt(t, crd.StageAddVersion, "v1alpha1", "v1"), crd.StageAddVersion, true, ""},
		{"flip-storage", widgetAt(t, crd.StageFlipStorage, "v1alpha1", "v1"), crd.StageFlipStorage, false, ""},
		{"migrate done", widgetAt(t, crd.StageMigrate, "v1"), crd.StageMigrate, false, ""},
		{"unserve", widgetAt(t, crd.StageUnserve, "v1"), crd.StageUnserve, false, ""},
		{"unserved while still stored", widgetAt(t, crd.StageUnserve, "v1alpha1", "v1"), "", false, "not served but storedVersions"},
		{"initial with v1 stored", widgetAt(t, crd.StageInitial, "v1alpha1", "v1"), "", false, "only v1alpha1 is defined"},
		{"unknown stored version", widgetAt(t, crd.StageMigrate, "v1", "v2"), "", false, "holds v2"},
		{"storage flipped without a conversion webhook", func() *apiextensionsv1.CustomResourceDefinition {
			c := widgetAt(t, crd.StageFlipStorage, "v1alpha1", "v1")
			c.Spec.Conversion = nil
			return c
		}(), "", false, "conversion is None"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ObserveCRD(tc.crd, cfg)
			if o.Stage != tc.want || o.RolledBack != tc.rolledBack {
				t.Errorf("stage %q rolledBack %v, want %q %v (inconsistent: %s)", o.Stage, o.RolledBack, tc.want, tc.rolledBack, o.Inconsistent)
			}
			if tc.bad == "" && o.Inconsistent != "" || !strings.Contains(o.Inconsistent, tc.bad) {
				t.Errorf("inconsistent %q, want it to mention %q", o.Inconsistent, tc.bad)
			}
		})
	}
}

func TestPlanOneStageAtATime(t *testing.T) {
	cfg := WidgetConfig()
	initial := ObserveCRD(widgetAt(t, crd.StageInitial, "v1alpha1"), cfg)
	if _, err := Plan(initial, cfg, crd.StageFlipStorage, false); !IsRefusal(err) || !strings.Contains(err.Error(), "next safe step: add-version (runbooks/upgrade/add-version.md)") {
		t.Errorf("skipping a stage: %v", err)
	}
	steps, err := Plan(initial, cfg, crd.StageUnserve, true)
	if err != nil || len(steps) != 4 || steps[3].From != crd.StageMigrate || steps[3].To != crd.StageUnserve {
		t.Errorf("an allowed jump plans every step: %+v %v", steps, err)
	}
	if _, err := Plan(initial, cfg, "final", false); !IsRefusal(err) || !strings.Contains(err.Error(), `unknown stage "final"`) {
		t.Errorf("unknown stage: %v", err)
	}
	unserve := ObserveCRD(widgetAt(t, crd.StageUnserve, "v1"), cfg)
	steps, err = Plan(unserve, cfg, crd.StageMigrate, false)
	if err != nil || len(steps) != 1 || !steps[0].Rollback {
		t.Errorf("rollback unserve -> migrate: %+v %v", steps, err)
	}
	if steps, err := Plan(unserve, cfg, crd.StageUnserve, false); err != nil || len(steps) != 0 {
		t.Errorf("at the target already: %+v %v", steps, err)
	}
	migrated := ObserveCRD(widgetAt(t, crd.StageMigrate, "v1"), cfg)
	if steps, err := Plan(migrated, cfg, crd.StageAddVersion, false); err != nil || len(steps) != 2 {
		t.Errorf("migrate -> add-version is one change of flags (helm rollback from flip-storage after the migration): %+v %v", steps, err)
	}
	if _, err := Plan(initial, cfg, crd.StageMigrate, false); !IsRefusal(err) {
		t.Errorf("initial -> migrate changes the flags twice: %v", err)
	}
	missing := &Observation{CRD: cfg.CRD}
	if steps, err := Plan(missing, cfg, crd.StageMigrate, false); err != nil || len(steps) != 1 {
		t.Errorf("no CRD: any stage may be installed: %+v %v", steps, err)
	}
	bad := ObserveCRD(widgetAt(t, crd.StageUnserve, "v1alpha1", "v1"), cfg)
	if _, err := Plan(bad, cfg, crd.StageMigrate, false); !IsRefusal(err) || !strings.Contains(err.Error(), "inconsistent") {
		t.Errorf("inconsistent state: %v", err)
	}
}

func TestSetStageFlagsNeverDropsAStoredVersionSilently(t *testing.T) {
	cfg := WidgetConfig()
	live := widgetAt(t, crd.StageAddVersion, "v1alpha1", "v1")
	o := ObserveCRD(live, cfg)
	steps, err := Plan(o, cfg, crd.StageInitial, false)
	if err != nil || len(steps) != 1 || steps[0].Checks[len(steps[0].Checks)-1] != CheckNothingNewStored {
		t.Fatalf("add-version -> initial must check nothing is stored as v1: %+v %v", steps, err)
	}
}

func TestCheckVersionsKept(t *testing.T) {
	c := widgetAt(t, crd.StageMigrate, "v1alpha1", "v1")
	// Drop v1alpha1 while it is stored.
	c.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{*crd.Version(c, "v1")}
	err := CheckVersionsKept(c)
	if !IsRefusal(err) || !strings.Contains(err.Error(), "removing version v1alpha1") || !strings.Contains(err.Error(), "widgetctl migrate") {
		t.Errorf("got %v", err)
	}
	if err := CheckVersionsKept(widgetAt(t, crd.StageMigrate, "v1")); err != nil {
		t.Errorf("a CRD keeping its stored versions: %v", err)
	}
}

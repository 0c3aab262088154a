package upgrade

import (
	"slices"
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
		{"remove", widgetAt(t, crd.StageRemove, "v1"), crd.StageRemove, false, ""},
		{"v1 unserved at remove", func() *apiextensionsv1.CustomResourceDefinition {
			c := widgetAt(t, crd.StageRemove, "v1")
			c.Spec.Versions[0].Served = false
			return c
		}(), "", false, "match no stage"},
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
	if _, err := Plan(initial, cfg, crd.StageFlipStorage); !IsRefusal(err) || !strings.Contains(err.Error(), "next safe step: add-version (runbooks/upgrade/add-version.md)") {
		t.Errorf("skipping a stage: %v", err)
	}
	if _, err := Plan(initial, cfg, crd.StageUnserve); !IsRefusal(err) || !strings.Contains(err.Error(), "next safe step: add-version") {
		t.Errorf("initial -> unserve: %v", err)
	}
	if _, err := Plan(initial, cfg, "final"); !IsRefusal(err) || !strings.Contains(err.Error(), `unknown stage "final"`) {
		t.Errorf("unknown stage: %v", err)
	}
	unserve := ObserveCRD(widgetAt(t, crd.StageUnserve, "v1"), cfg)
	steps, err := Plan(unserve, cfg, crd.StageMigrate)
	if err != nil || len(steps) != 1 || !steps[0].Rollback {
		t.Errorf("rollback unserve -> migrate: %+v %v", steps, err)
	}
	if steps, err := Plan(unserve, cfg, crd.StageUnserve); err != nil || len(steps) != 1 || steps[0].From != steps[0].To ||
		!slices.Equal(steps[0].Checks, []Check{CheckEstablished, CheckBuildConversion}) {
		t.Errorf("at the target already, the new build's conversion is checked: %+v %v", steps, err)
	}
	migrated := ObserveCRD(widgetAt(t, crd.StageMigrate, "v1"), cfg)
	if steps, err := Plan(migrated, cfg, crd.StageAddVersion); err != nil || len(steps) != 2 {
		t.Errorf("migrate -> add-version is one change of flags (helm rollback from flip-storage after the migration): %+v %v", steps, err)
	}
	if _, err := Plan(initial, cfg, crd.StageMigrate); !IsRefusal(err) {
		t.Errorf("initial -> migrate changes the flags twice: %v", err)
	}
	if steps, err := Plan(unserve, cfg, crd.StageRemove); err != nil || len(steps) != 1 || steps[0].Rollback ||
		!slices.Equal(steps[0].Checks, []Check{CheckEstablished, CheckOnlyNewStored, CheckOwnerReferences, CheckOldManagedFields, CheckOldManifests, CheckRestoreDrilled, CheckOldTraffic}) {
		t.Errorf("unserve -> remove: %+v %v", steps, err)
	}
	removed := ObserveCRD(widgetAt(t, crd.StageRemove, "v1"), cfg)
	if steps, err := Plan(removed, cfg, crd.StageUnserve); err != nil || len(steps) != 1 || !steps[0].Rollback {
		t.Errorf("rollback remove -> unserve: %+v %v", steps, err)
	}
	if _, err := Plan(removed, cfg, crd.StageMigrate); !IsRefusal(err) || !strings.Contains(err.Error(), "next safe step: unserve (runbooks/upgrade/unserve.md)") {
		t.Errorf("remove -> migrate skips unserve: %v", err)
	}
	if _, err := Plan(migrated, cfg, crd.StageRemove); !IsRefusal(err) || !strings.Contains(err.Error(), "next safe step: unserve") {
		t.Errorf("migrate -> remove skips unserve: %v", err)
	}
	missing := &Observation{CRD: cfg.CRD}
	if steps, err := Plan(missing, cfg, crd.StageMigrate); err != nil || len(steps) != 1 {
		t.Errorf("no CRD: any stage may be installed: %+v %v", steps, err)
	}
}

// TestPlanRepairsAnInconsistentCRD: from every inconsistent state the observer can report there
// is a way back (or, where flags cannot fix it, a refusal that says so), and the repair is one
// step to a stage whose flags make the CRD consistent with what is stored.
func TestPlanRepairsAnInconsistentCRD(t *testing.T) {
	cfg := WidgetConfig()
	// initial -> unserve in one change (hooks off, before the stage guard): v1alpha1 unserved
	// while still stored.
	jumped := ObserveCRD(widgetAt(t, crd.StageUnserve, "v1alpha1", "v1"), cfg)
	if jumped.Inconsistent == "" || !strings.Contains(jumped.Inconsistent, "plan --to migrate") {
		t.Fatalf("observed %q, want an inconsistent state naming the repair", jumped.Inconsistent)
	}
	var to []crd.Stage
	for _, r := range Repairs(jumped, cfg) {
		to = append(to, r.To)
	}
	if !slices.Equal(to, []crd.Stage{crd.StageAddVersion, crd.StageFlipStorage, crd.StageMigrate}) {
		t.Errorf("repairs %v, want add-version, flip-storage, migrate", to)
	}
	steps, err := Plan(jumped, cfg, crd.StageMigrate)
	if err != nil || len(steps) != 1 || !steps[0].Repair || !slices.Contains(steps[0].Checks, CheckWebhookProbe) {
		t.Fatalf("repair to migrate: %+v %v", steps, err)
	}
	repaired := jumped.live.DeepCopy()
	if err := setStageFlags(repaired, cfg, steps[0].To); err != nil {
		t.Fatal(err)
	}
	if o := ObserveCRD(repaired, cfg); o.Stage != crd.StageFlipStorage || o.Inconsistent != "" {
		t.Errorf("after the repair the CRD reads as %s (%s), want flip-storage: migrate next", o.StageLabel(), o.Inconsistent)
	}
	if _, err := Plan(jumped, cfg, crd.StageUnserve); !IsRefusal(err) || !strings.Contains(err.Error(), "add-version, flip-storage, migrate") ||
		!strings.Contains(err.Error(), "runbooks/upgrade/README.md#inconsistent") {
		t.Errorf("unserve does not repair it: %v", err)
	}

	// Both versions with conversion None: the chart's helm upgrade renders the webhook again.
	none := widgetAt(t, crd.StageMigrate, "v1")
	none.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	o := ObserveCRD(none, cfg)
	if steps, err := Plan(o, cfg, crd.StageMigrate); err != nil || len(steps) != 1 || !strings.Contains(steps[0].Change, "conversion webhook is back") {
		t.Errorf("conversion None: %+v %v", steps, err)
	}

	// Not Established: no flags repair that.
	broken := widgetAt(t, crd.StageInitial, "v1alpha1")
	broken.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse}}
	if _, err := Plan(ObserveCRD(broken, cfg), cfg, crd.StageInitial); !IsRefusal(err) || !strings.Contains(err.Error(), "by hand") {
		t.Errorf("not Established: %v", err)
	}
}

func TestSetStageFlagsNeverDropsAStoredVersionSilently(t *testing.T) {
	cfg := WidgetConfig()
	live := widgetAt(t, crd.StageAddVersion, "v1alpha1", "v1")
	o := ObserveCRD(live, cfg)
	steps, err := Plan(o, cfg, crd.StageInitial)
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

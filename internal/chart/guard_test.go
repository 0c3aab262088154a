//go:build envtest

package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/runbooks"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/upgrade"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// storedAt is what status.storedVersions holds at each stage once its hooks have run (the
// stage table of internal/crd): the flip's writes add v1, the migration at migrate trims
// v1alpha1 away, and nothing stores v1alpha1 again after it, so unserve and remove hold [v1]
// (upgrade.ObserveCRD reads remove only from [v1]).
var storedAt = map[crd.Stage][]string{
	crd.StageInitial: {"v1alpha1"}, crd.StageAddVersion: {"v1alpha1"}, crd.StageFlipStorage: {"v1alpha1", "v1"},
	crd.StageMigrate: {"v1"}, crd.StageUnserve: {"v1"}, crd.StageRemove: {"v1"},
}

// guardEnv is a real apiserver with the chart's stage guard (the ValidatingAdmissionPolicy and
// its binding, as rendered) and nothing else of the chart.
type guardEnv struct {
	t   *testing.T
	env *testenv.Env
	// auditLog is the apiserver's audit log (level Metadata for CRDs), where the guard's
	// audit annotations land.
	auditLog string
}

func startGuard(t *testing.T) *guardEnv {
	t.Helper()
	// kube-controller-manager writes the policy's status.typeChecking.
	opts := testenv.Options{ControllerManager: true}
	g := &guardEnv{t: t, auditLog: testenv.AuditLog(t, &opts, "apiextensions.k8s.io/customresourcedefinitions")}
	g.env = testenv.Start(t, opts)
	objs := render(t, nil)
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		part := objs.Get(kind, guardName)
		if part == nil {
			t.Fatalf("the chart renders no %s %s", kind, guardName)
		}
		if err := g.env.Client.Create(t.Context(), part.DeepCopy()); err != nil {
			t.Fatalf("create %s: %v", kind, err)
		}
	}
	// The policy's expressions type-check against the CRD type without a warning.
	testenv.Eventually(t, 30*time.Second, "the stage guard type-checked", func() error {
		u := objs.Get("ValidatingAdmissionPolicy", guardName).DeepCopy()
		if err := g.env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		tc, found, _ := unstructured.NestedMap(u.Object, "status", "typeChecking")
		if !found {
			return fmt.Errorf("no status.typeChecking yet")
		}
		if w, _, _ := unstructured.NestedSlice(tc, "expressionWarnings"); len(w) > 0 {
			t.Fatalf("the stage guard's expressions do not type-check: %v", w)
		}
		return nil
	})
	// The admission plugin picks the policy up a moment after it exists: wait until a jump
	// is refused, on a CRD made for this and deleted again.
	g.create(crd.StageInitial)
	testenv.Eventually(t, 30*time.Second, "the stage guard refuses initial -> unserve", func() error {
		if err := g.move(crd.StageUnserve, true); !isGuard(err) {
			return fmt.Errorf("not refused by the guard yet: %w", err)
		}
		return nil
	})
	g.delete()
	return g
}

// at returns the CRD as the chart renders it at stage.
func (g *guardEnv) at(stage crd.Stage) *apiextensionsv1.CustomResourceDefinition {
	g.t.Helper()
	u := render(g.t, set("apiUpgrade.stage", string(stage))).Get("CustomResourceDefinition", crd.WidgetName)
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := helmtemplate.Into(u, c); err != nil {
		g.t.Fatal(err)
	}
	return c
}

// create creates the CRD at stage with the storedVersions its hooks leave.
func (g *guardEnv) create(stage crd.Stage) {
	g.t.Helper()
	c := g.at(stage)
	if err := g.env.Client.Create(g.t.Context(), c); err != nil {
		g.t.Fatalf("create the CRD at %s: %v", stage, err)
	}
	testenv.Eventually(g.t, 30*time.Second, "the CRD Established", func() error {
		c = g.live()
		for _, cond := range c.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", c.Status.Conditions)
	})
	if !slices.Equal(c.Status.StoredVersions, storedAt[stage]) {
		c.Status.StoredVersions = storedAt[stage]
		if err := g.env.Client.Status().Update(g.t.Context(), c); err != nil {
			g.t.Fatalf("storedVersions %v: %v", storedAt[stage], err)
		}
	}
}

func (g *guardEnv) delete() {
	g.t.Helper()
	c := &apiextensionsv1.CustomResourceDefinition{}
	c.Name = crd.WidgetName
	if err := g.env.Client.Delete(g.t.Context(), c); err != nil {
		g.t.Fatal(err)
	}
	// The apiserver's own finalizer (customresourcecleanup) removes the CRD once its
	// instances are gone; on a busy 2-core machine running the envtest packages side by side
	// under -race that took more than a minute once, so the wait is generous and a timeout
	// says what the CRD was waiting for.
	testenv.Eventually(g.t, 3*time.Minute, "the CRD deleted", func() error {
		err := g.env.Client.Get(g.t.Context(), client.ObjectKey{Name: crd.WidgetName}, c)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("reading it: %w", err)
		}
		var conds []string
		for _, cond := range c.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message))
		}
		return fmt.Errorf("still there: deletionTimestamp %v, finalizers %v, conditions %v", c.DeletionTimestamp, c.Finalizers, conds)
	})
}

func (g *guardEnv) live() *apiextensionsv1.CustomResourceDefinition {
	g.t.Helper()
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := g.env.Client.Get(g.t.Context(), client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
		g.t.Fatal(err)
	}
	return c
}

// moved returns the live CRD with stage's versions, as the chart renders them: the change
// move makes.
func (g *guardEnv) moved(stage crd.Stage) *apiextensionsv1.CustomResourceDefinition {
	g.t.Helper()
	c := g.live()
	c.Spec.Versions = g.at(stage).Spec.Versions
	return c
}

// move sets the live CRD's versions to stage's, as the chart renders them (a dry run leaves
// the CRD as it is; admission runs all the same).
func (g *guardEnv) move(stage crd.Stage, dryRun bool) error {
	g.t.Helper()
	c := g.moved(stage)
	var opts []client.UpdateOption
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return g.env.Client.Update(g.t.Context(), c, opts...)
}

// isGuard reports whether err is the stage guard's refusal.
func isGuard(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'widgets.widgetry.io-stage-guard'")
}

// verdict is what the apiserver answers to a change of the CRD, or what the plan says it
// must answer.
type verdict int

const (
	admitted verdict = iota
	// refusedByGuard: the chart's stage guard refuses it.
	refusedByGuard
	// refusedByValidation: the apiserver's own validation refuses it before admission runs,
	// so before the guard sees it: a version still in status.storedVersions dropped from
	// spec.versions ("missing from spec.versions").
	refusedByValidation
	// refusedOtherwise: any other error; never what the plan expects.
	refusedOtherwise
)

func (v verdict) String() string {
	return [...]string{"admits it", "refuses it by the stage guard", "refuses it by its own validation (a stored version dropped from spec.versions)", "refuses it otherwise"}[v]
}

// answered is the apiserver's verdict on a change, from the error it returned.
func answered(err error) verdict {
	switch {
	case err == nil:
		return admitted
	case isGuard(err):
		return refusedByGuard
	case strings.Contains(err.Error(), "missing from spec.versions"):
		return refusedByValidation
	}
	return refusedOtherwise
}

// storedVersionChecks are the preflight checks that read nothing but the observed
// storedVersions: the plan's own say on whether a step may be taken with what is stored
// (the rest of the preflight asks the webhook, the objects and the metrics).
var storedVersionChecks = []upgrade.Check{upgrade.CheckOnlyNewStored, upgrade.CheckNothingNewStored}

// planVerdict is what the engine says the apiserver must answer to desired, the CRD observed
// as o moved to stage to in one change, and why:
//   - refused by validation when upgrade.CheckVersionsKept refuses desired (upgrade.Apply
//     refuses to write it, since the apiserver's validation refuses it before admission);
//   - refused by the guard when upgrade.Plan does not make the move in one change, or when
//     one of its steps fails a storedVersionChecks check on the storedVersions observed
//     (flip-storage to unserve plans the migration as a step of its own, and nothing may be
//     unserved before it ran);
//   - admitted otherwise.
func planVerdict(t *testing.T, o *upgrade.Observation, cfg upgrade.Config, desired *apiextensionsv1.CustomResourceDefinition, to crd.Stage) (verdict, string) {
	t.Helper()
	if err := upgrade.CheckVersionsKept(desired); err != nil {
		return refusedByValidation, err.Error()
	}
	steps, err := upgrade.Plan(o, cfg, to)
	if err != nil {
		return refusedByGuard, err.Error()
	}
	stored := make([]upgrade.Step, len(steps))
	for i, s := range steps {
		s.Checks = slices.DeleteFunc(slices.Clone(s.Checks), func(c upgrade.Check) bool { return !slices.Contains(storedVersionChecks, c) })
		stored[i] = s
	}
	// These checks read only o: no client is needed, none is given.
	if _, err := upgrade.Preflight(t.Context(), upgrade.Clients{}, cfg, o, stored); err != nil {
		return refusedByGuard, err.Error()
	}
	return admitted, fmt.Sprintf("%d step(s), the storedVersions checks pass", len(steps))
}

// TestStageGuardAgreesWithThePlan applies every change from one stage's CRD (with the
// storedVersions of that stage) to another's on a real apiserver and checks the apiserver's
// answer against the engine's (planVerdict): it admits exactly the changes the engine makes in
// one step, its own validation refuses exactly those that drop a stored version, and the
// stage guard refuses all the others, naming a runbook. Any disagreement fails, either way.
func TestStageGuardAgreesWithThePlan(t *testing.T) {
	g := startGuard(t)
	cfg := upgrade.WidgetConfig()
	for _, from := range crd.Stages {
		if _, ok := storedAt[from]; !ok {
			t.Fatalf("storedAt has no storedVersions for stage %s", from)
		}
		g.create(from)
		o := upgrade.ObserveCRD(g.live(), cfg)
		if o.Stage != from || o.Inconsistent != "" {
			t.Fatalf("created at %s, observed %s (%s)", from, o.StageLabel(), o.Inconsistent)
		}
		for _, to := range crd.Stages {
			want, why := planVerdict(t, o, cfg, g.moved(to), to)
			err := g.move(to, true)
			got := answered(err)
			if got != want {
				t.Errorf("%s -> %s (storedVersions %v): the plan says the apiserver %s (%s); the apiserver %s: %v", from, to, storedAt[from], want, why, got, err)
			}
			if got == refusedByGuard && !strings.Contains(err.Error(), "runbooks/") {
				t.Errorf("%s -> %s: the refusal names no runbook: %v", from, to, err)
			}
		}
		g.delete()
	}
}

// TestStageGuardBypassesAndBreakGlass: the ways around the chart's hooks — kubectl apply of an
// old CRD manifest, kubectl patch of the flags or of the conversion — are refused by the
// apiserver with the runbook named and leave the CRD as it was; the break-glass annotation
// lets the conversion-outage procedure through and its repair back; the rules ratchet, so an
// inconsistent CRD still takes cainjector's writes and the plan's repair.
func TestStageGuardBypassesAndBreakGlass(t *testing.T) {
	g := startGuard(t)
	unchanged := func(t *testing.T, before *apiextensionsv1.CustomResourceDefinition) {
		t.Helper()
		if after := g.live(); !reflect.DeepEqual(after.Spec, before.Spec) || !reflect.DeepEqual(after.Annotations, before.Annotations) {
			t.Errorf("a refused change changed the CRD:\n%s", cmp.Diff(before.Spec, after.Spec))
		}
	}
	refused := func(t *testing.T, out string, err error, want string) {
		t.Helper()
		if !isGuard(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("want the stage guard's refusal naming %q, got %v:\n%s", want, err, out)
		}
	}
	manifest := func(t *testing.T, stage crd.Stage) string {
		t.Helper()
		c := g.at(stage)
		c.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), string(stage)+".json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}

	for _, tc := range []struct {
		name  string
		stage crd.Stage
		// kubectl is the command's arguments, given the CRD as created.
		kubectl func(t *testing.T, live *apiextensionsv1.CustomResourceDefinition) []string
		want    string
	}{{
		name: "kubectl apply of the add-version manifest at unserve", stage: crd.StageUnserve, want: "runbooks/upgrade/README.md",
		kubectl: func(t *testing.T, _ *apiextensionsv1.CustomResourceDefinition) []string {
			return []string{"apply", "--server-side", "--force-conflicts", "-f", manifest(t, crd.StageAddVersion)}
		},
	}, {
		// The apiserver lists a new storage version in storedVersions before admission runs.
		name: "kubectl patch at add-version: a storage version that is not served", stage: crd.StageAddVersion, want: "(the storage version included) must be served",
		kubectl: func(_ *testing.T, live *apiextensionsv1.CustomResourceDefinition) []string {
			var ops []string
			for i, v := range live.Spec.Versions {
				// v1 becomes the storage version, unserved; v1alpha1 (stored) stays served.
				ops = append(ops, fmt.Sprintf(`{"op":"replace","path":"/spec/versions/%d/storage","value":%t}`, i, v.Name == "v1"),
					fmt.Sprintf(`{"op":"replace","path":"/spec/versions/%d/served","value":%t}`, i, v.Name != "v1"))
			}
			return []string{"patch", "crd", crd.WidgetName, "--type=json", "-p", "[" + strings.Join(ops, ",") + "]"}
		},
	}, {
		name: "kubectl patch at migrate: the stored version unserved", stage: crd.StageMigrate, want: "runbooks/upgrade/migrate.md",
		kubectl: func(_ *testing.T, live *apiextensionsv1.CustomResourceDefinition) []string {
			i := slices.IndexFunc(live.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Storage })
			return []string{"patch", "crd", crd.WidgetName, "--type=json", "-p", fmt.Sprintf(`[{"op":"replace","path":"/spec/versions/%d/served","value":false}]`, i)}
		},
	}} {
		g.create(tc.stage)
		t.Run(tc.name, func(t *testing.T) {
			before := g.live()
			out, err := g.env.Kubectl(t, tc.kubectl(t, before)...)
			refused(t, out, err, tc.want)
			unchanged(t, before)
		})
		g.delete()
	}

	g.create(crd.StageMigrate)
	conversionNone := `{"spec":{"conversion":{"strategy":"None","webhook":null}}}`
	t.Run("kubectl patch: conversion None with two versions served", func(t *testing.T) {
		before := g.live()
		out, err := g.env.Kubectl(t, "patch", "crd", crd.WidgetName, "--type=merge", "-p", conversionNone)
		refused(t, out, err, "runbooks/procedures/conversion-webhook-outage.md")
		unchanged(t, before)
	})
	t.Run("break-glass: the outage procedure and its way back", func(t *testing.T) {
		// The commands of the conversion-outage runbook, as written.
		breakGlass := runbookLine(t, outageRunbook, `"strategy":"None"`)
		out, err := g.env.Shell(t, breakGlass)
		if err != nil {
			t.Fatalf("the runbook's break-glass patch refused: %v\n%s", err, out)
		}
		if s := g.live().Spec.Conversion.Strategy; s != apiextensionsv1.NoneConverter {
			t.Fatalf("conversion %s after the break-glass patch", s)
		}
		// The audit log records the change with the reason.
		testenv.Eventually(t, 10*time.Second, "the break-glass reason in the audit log", func() error {
			b, err := os.ReadFile(g.auditLog)
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), `"widgets.widgetry.io-stage-guard/break-glass":"conversion webhook outage since `) {
				return fmt.Errorf("not in the audit log (%d bytes)", len(b))
			}
			return nil
		})
		// The restore, as helm upgrade renders it, repairs the breach: admitted with or without
		// break-glass; then the runbook's removal of the annotation, which the guard admits.
		restore := func() {
			t.Helper()
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				c := g.live()
				c.Spec.Conversion = g.at(crd.StageMigrate).Spec.Conversion
				return g.env.Client.Update(t.Context(), c)
			})
			if err != nil {
				t.Fatalf("restoring the conversion webhook: %v", err)
			}
		}
		restore()
		if out, err := g.env.Shell(t, runbookLine(t, outageRunbook, "widgetry.io/break-glass-")); err != nil {
			t.Fatalf("the runbook's removal of the annotation: %v\n%s", err, out)
		}
		if a, ok := g.live().Annotations["widgetry.io/break-glass"]; ok {
			t.Errorf("the break-glass annotation %q is still there after the restore", a)
		}
		// Removing the annotation first leaves the breach as it was: admitted (ratchet).
		if out, err := g.env.Shell(t, breakGlass); err != nil {
			t.Fatalf("break-glass again: %v\n%s", err, out)
		}
		if out, err := g.env.Kubectl(t, "annotate", "crd", crd.WidgetName, "widgetry.io/break-glass-"); err != nil {
			t.Fatalf("removing the annotation before the restore: %v\n%s", err, out)
		}
		restore()
	})
	g.delete()

	g.create(crd.StageFlipStorage)
	t.Run("an inconsistent CRD takes cainjector's writes and the plan's repair", func(t *testing.T) {
		// v1alpha1 unserved while stored, under break-glass (as before the guard existed).
		update := func(change func(c *apiextensionsv1.CustomResourceDefinition)) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				c := g.live()
				change(c)
				return g.env.Client.Update(t.Context(), c)
			})
		}
		err := update(func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Annotations = map[string]string{"widgetry.io/break-glass": "test: make it inconsistent"}
			c.Spec.Versions = g.at(crd.StageUnserve).Spec.Versions
		})
		if err != nil {
			t.Fatal(err)
		}
		err = update(func(c *apiextensionsv1.CustomResourceDefinition) {
			delete(c.Annotations, "widgetry.io/break-glass")
			c.Spec.Conversion.Webhook.ClientConfig.CABundle = testcerts.NewCA(t, "cainjector stand-in").PEM
		})
		if err != nil {
			t.Fatalf("the annotation's removal and a caBundle write on the inconsistent CRD: %v", err)
		}
		cfg := upgrade.WidgetConfig()
		o := upgrade.ObserveCRD(g.live(), cfg)
		if o.Inconsistent == "" {
			t.Fatalf("observed %s, want inconsistent", o.StageLabel())
		}
		steps, err := upgrade.Plan(o, cfg, crd.StageMigrate)
		if err != nil || len(steps) != 1 || !steps[0].Repair {
			t.Fatalf("plan from inconsistent to migrate: %+v %v", steps, err)
		}
		if err := upgrade.Apply(t.Context(), g.env.Client, cfg, o, steps[0]); err != nil {
			t.Fatalf("the repair: %v", err)
		}
		if o := upgrade.ObserveCRD(g.live(), cfg); o.Stage != crd.StageFlipStorage {
			t.Errorf("after the repair: %s (%s), want flip-storage", o.StageLabel(), o.Inconsistent)
		}
	})
	g.delete()
}

// guardName names the stage guard's policy and binding (the chart renders the warnings
// policy beside them).
const guardName = "widgets.widgetry.io-stage-guard"

// outageRunbook is the page whose break-glass the guard must let through.
const outageRunbook = "procedures/conversion-webhook-outage.md"

// runbookLine returns the one command line of page holding want, with the assignments of its
// block before it: the script on-call runs.
func runbookLine(t *testing.T, page, want string) string {
	t.Helper()
	lines, err := runbooks.Lines(filepath.Join(prereq.RepoRoot(t), "runbooks"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, l := range lines {
		if l.File == page && strings.Contains(l.Command, want) {
			found = append(found, strings.Join(append(slices.Clone(l.Assignments), l.Command), "\n"))
		}
	}
	if len(found) != 1 {
		t.Fatalf("runbooks/%s has %d command lines with %q, want 1", page, len(found), want)
	}
	return found[0]
}

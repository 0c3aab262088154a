//go:build envtest

package upgrade_test

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/apiservers"
	"github.com/widgetry/widget-operator/internal/apitraffic"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

const ns = "walk"

// trafficWindow is the walk's window of the v1alpha1 traffic check.
const trafficWindow = 2 * time.Second

// rig is an apiserver with the Widget CRD converting through a webhook the test can take down.
type rig struct {
	t    *testing.T
	env  *testenv.Env
	cfg  upgrade.Config
	cl   upgrade.Clients
	hook *widgetenv.Webhook
	// fleet is the Widgets written at every stage and read back after every step.
	fleet *widgetenv.Fleet
	// manifest is a v1alpha1 manifest a GitOps tool applies (server-side) once, with its
	// endpoints out of name order; "" until it is applied.
	manifest string
}

// gitopsNS holds the manifest's Widget, apart from the fleet's.
const gitopsNS = "gitops"

func newRig(t *testing.T) *rig {
	r := &rig{t: t, cfg: upgrade.WidgetConfig()}
	// An audit log at level Metadata for Widgets: the traffic check names the clients.
	opts := testenv.Options{}
	auditLog := testenv.AuditLog(t, &opts, "widgetry.io")
	r.env, r.hook = widgetenv.StartAtStage(t, crd.StageInitial, opts)
	r.fleet = &widgetenv.Fleet{Client: r.env.Client, Namespace: ns, N: objects(), Workers: 8}
	hc, err := apiservers.HTTPClient(r.env.Config, "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// One kube-apiserver, asked at the address the test talks to; a short window, so that a
	// refused check passes on a rerun after it.
	traffic := &upgrade.TrafficCheck{
		Ledger: apitraffic.Ledger{Client: r.env.Client, Namespace: "widget-system", Name: apitraffic.LedgerName(crd.WidgetName)},
		HTTP:   hc, Window: trafficWindow, AuditLog: auditLog,
		Instances: func(context.Context) ([]string, error) {
			u, err := url.Parse(r.env.Config.Host)
			return []string{u.Host}, err
		},
	}
	r.cl = upgrade.Clients{Client: r.env.Client, Metadata: metadata.NewForConfigOrDie(r.env.Config), DryRunNamespace: ns, Traffic: traffic,
		// The restore drill is proven in the cli's TestRestoreAndDrill and TestUpgradeCommands.
		AllowUndrilledReason: "engine walk: no backup taken"}
	for _, n := range []string{ns, "widget-system", gitopsNS} {
		if err := r.env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *rig) observe() *upgrade.Observation {
	r.t.Helper()
	o, err := upgrade.Observe(context.Background(), r.env.Client, r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	return o
}

// step moves to target as the chart's hooks would: plan, preflight, apply, then the
// migration at migrate. It returns the refusal, if any.
func (r *rig) step(target crd.Stage) error {
	r.t.Helper()
	ctx := context.Background()
	o := r.observe()
	steps, err := upgrade.Plan(o, r.cfg, target)
	if err != nil {
		return err
	}
	if _, err := upgrade.Preflight(ctx, r.cl, r.cfg, o, steps); err != nil {
		return err
	}
	for _, s := range steps {
		if err := upgrade.Apply(ctx, r.env.Client, r.cfg, o, s); err != nil {
			return err
		}
	}
	r.settle(target)
	if target == crd.StageMigrate && !o.RolledBack {
		r.migrate("")
	}
	return nil
}

// settle waits until the apiserver serves what the CRD now says (it rebuilds the CRD's
// handlers asynchronously): reads through each served version work and writes land in the
// storage version.
func (r *rig) settle(stage crd.Stage) {
	r.t.Helper()
	storage := "v1"
	if stage == crd.StageInitial || stage == crd.StageAddVersion {
		storage = "v1alpha1"
	}
	if stage == crd.StageFlipStorage || stage == crd.StageAddVersion { // the steps that move the storage version
		widgetenv.WaitForStorageVersion(r.t, r.env, storage, ns)
	}
	for _, v := range widgetenv.Served(stage) {
		testenv.Eventually(r.t, 30*time.Second, "list through "+v, func() error {
			return r.env.Client.List(context.Background(), listOf(v), client.InNamespace(ns), client.Limit(1))
		})
	}
}

func (r *rig) migrate(to string) {
	r.t.Helper()
	m, err := migrate.New(r.env.Config)
	if err != nil {
		r.t.Fatal(err)
	}
	res, err := m.Migrate(context.Background(), migrate.Options{CRD: crd.WidgetName, To: to, Backend: migrate.BackendClient, ProgressNamespace: "widget-system"})
	if err != nil {
		r.t.Fatalf("migrate: %v", err)
	}
	r.t.Logf("migrated %d objects to %s in %s", res.Counts.Migrated, res.StorageVersion, res.Duration.Round(time.Millisecond))
}

func listOf(version string) client.ObjectList {
	if version == "v1" {
		return &v1.WidgetList{}
	}
	return &v1alpha1.WidgetList{}
}

func objects() int {
	if n, err := strconv.Atoi(os.Getenv("WIDGET_WALK_OBJECTS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// write creates (first round) or updates every Widget through the versions served at stage.
func (r *rig) write(stage crd.Stage, round int) {
	r.t.Helper()
	if err := r.fleet.Write(context.Background(), widgetenv.Served(stage), round); err != nil {
		r.t.Fatalf("%s: %v", stage, err)
	}
}

// verify reads every Widget through every version served at stage and compares it with
// what was last written: 0 lost or changed fields.
func (r *rig) verify(stage crd.Stage) {
	r.t.Helper()
	if err := r.fleet.Verify(context.Background(), widgetenv.Served(stage)); err != nil {
		r.t.Fatalf("%s: %v", stage, err)
	}
	if r.manifest != "" && slices.Contains(widgetenv.Served(stage), "v1alpha1") {
		r.manifestUnchanged(stage)
	}
}

// applyManifest applies, server-side as a GitOps tool does, a v1alpha1 Widget whose endpoints
// are not in name order (widgetenv.WriteGitOpsManifest).
func (r *rig) applyManifest() {
	r.t.Helper()
	var err error
	if r.manifest, err = widgetenv.WriteGitOpsManifest(r.t.TempDir(), gitopsNS); err != nil {
		r.t.Fatal(err)
	}
	if out, err := r.env.Kubectl(r.t, "apply", "--server-side", "--field-manager=gitops", "-f", r.manifest); err != nil {
		r.t.Fatalf("kubectl apply --server-side of the v1alpha1 manifest: %v\n%s", err, out)
	}
}

// manifestUnchanged: the manifest's Widget reads back through v1alpha1 as written, endpoints
// in their order, and kubectl diff of the manifest is empty (a GitOps tool sees no drift and
// writes nothing), whatever version it is stored in.
func (r *rig) manifestUnchanged(stage crd.Stage) {
	r.t.Helper()
	if err := widgetenv.CheckGitOpsWidget(context.Background(), r.env.Client, gitopsNS); err != nil {
		r.t.Fatalf("%s: %v", stage, err)
	}
	if out, err := r.env.Kubectl(r.t, "diff", "--server-side", "--field-manager=gitops", "-f", r.manifest); err != nil {
		r.t.Fatalf("%s: kubectl diff of the applied v1alpha1 manifest is not empty: %v\n%s", stage, err, out)
	}
}

// TestFullWalkAndRollback: initial -> add-version -> flip-storage -> migrate -> unserve ->
// remove and every one-step rollback back to initial (the last after a reverse migration),
// writing every Widget at every stage through every served version and reading each back
// through every served version after every step. remove is refused while objects keep
// managedFields entries of v1alpha1, until they are dropped as the chart's hook does at
// unserve; after it, a manager that last applied through v1alpha1 applies through v1.
func TestFullWalkAndRollback(t *testing.T) {
	r := newRig(t)
	round := 0
	r.write(crd.StageInitial, round)
	r.applyManifest()
	r.verify(crd.StageInitial)
	applied := r.apply("v1alpha1", "registry.example.com/applied:v1alpha1")
	forward := []crd.Stage{crd.StageAddVersion, crd.StageFlipStorage, crd.StageMigrate, crd.StageUnserve, crd.StageRemove}
	for _, target := range forward {
		switch target {
		case crd.StageUnserve:
			r.unserveTraffic()
		case crd.StageRemove:
			r.managedFieldsRefusedThenDropped()
		}
		if err := r.step(target); err != nil {
			t.Fatalf("-> %s: %v", target, err)
		}
		r.verify(target)
		round++
		r.write(target, round)
		r.verify(target)
		if target == crd.StageMigrate {
			if o := r.observe(); len(o.StoredVersions) != 1 || o.StoredVersions[0] != "v1" {
				t.Fatalf("after migrate storedVersions %v, want [v1]", o.StoredVersions)
			}
			for key, apiVersion := range widgetenv.StoredAPIVersions(t, r.env) {
				if apiVersion != "widgetry.io/v1" {
					t.Fatalf("etcd holds %s as %s after the migration", key, apiVersion)
				}
			}
		}
		if got := r.observe().Stage; got != target {
			t.Fatalf("observed stage %s after stepping to %s", got, target)
		}
	}
	if o := r.observe(); len(o.StoredVersions) != 1 || o.Old.Present {
		t.Fatalf("at remove: v1alpha1 still defined (%+v) or storedVersions %v", o.Old, o.StoredVersions)
	}
	// A manager that last applied through v1alpha1 applies through v1 once v1alpha1 is gone.
	r.apply("v1", applied+"-v1")
	for _, target := range []crd.Stage{crd.StageUnserve, crd.StageMigrate, crd.StageFlipStorage, crd.StageAddVersion} {
		if err := r.step(target); err != nil {
			t.Fatalf("rollback -> %s: %v", target, err)
		}
		r.verify(target)
		round++
		r.write(target, round)
		r.verify(target)
	}
	// add-version -> initial needs v1 gone from storedVersions: refused, then done after the
	// reverse migration.
	if o := r.observe(); !o.RolledBack {
		t.Fatalf("after the rollback to add-version the CRD should show v1 stored: %v", o.StoredVersions)
	}
	err := r.step(crd.StageInitial)
	if !upgrade.IsRefusal(err) || !strings.Contains(err.Error(), "widgetctl migrate --crd widgets.widgetry.io --to v1alpha1") {
		t.Fatalf("rollback to initial without the reverse migration: %v", err)
	}
	r.migrate("v1alpha1")
	if err := r.step(crd.StageInitial); err != nil {
		t.Fatalf("rollback -> initial after the reverse migration: %v", err)
	}
	r.verify(crd.StageInitial)
	round++
	r.write(crd.StageInitial, round)
	r.verify(crd.StageInitial)
}

// managedFieldsRefusedThenDropped: the fleet wrote through v1alpha1, so remove is refused while
// those managedFields entries are left, naming the command that drops them; then they are
// dropped, as the chart's hook does at unserve.
func (r *rig) managedFieldsRefusedThenDropped() {
	r.t.Helper()
	before := r.observe()
	err := r.step(crd.StageRemove)
	if !upgrade.IsRefusal(err) || !strings.Contains(err.Error(), "no-managed-fields-of-old") ||
		!strings.Contains(err.Error(), "widgetctl migrate --crd widgets.widgetry.io --drop-managed-fields-of v1alpha1") {
		r.t.Fatalf("-> remove with managedFields entries of v1alpha1 left: %v, want a refusal naming the command that drops them", err)
	}
	if after := r.observe(); after.ResourceVersion != before.ResourceVersion {
		r.t.Fatal("the refused step changed the CRD")
	}
	m, err := migrate.New(r.env.Config)
	if err != nil {
		r.t.Fatal(err)
	}
	if counts, err := m.DropManagedFields(context.Background(), crd.WidgetName, "v1alpha1"); err != nil || counts.Migrated == 0 {
		r.t.Fatalf("drop the managedFields entries of v1alpha1: %+v %v", counts, err)
	}
}

// unserveTraffic: the fleet wrote and read through v1alpha1 since the storage flip, so the
// preflight of unserve refuses, naming the counts by verb; with a reason given it lets the
// step through and records the reason and the counts in an event on the CRD; rerun without
// one after the window, with no v1alpha1 request in between, it passes (the step follows).
func (r *rig) unserveTraffic() {
	r.t.Helper()
	ctx := context.Background()
	before := r.observe()
	err := r.step(crd.StageUnserve)
	if !upgrade.IsRefusal(err) || !strings.Contains(err.Error(), "no-old-version-traffic") || !strings.Contains(err.Error(), "v1alpha1 is still in use") ||
		!strings.Contains(err.Error(), "PUT ") || !strings.Contains(err.Error(), "LIST ") || !strings.Contains(err.Error(), "clients (audit log): ") ||
		!strings.Contains(err.Error(), " update ") {
		r.t.Fatalf("unserve after v1alpha1 writes and reads: %v, want a refusal with the counts by verb and the clients", err)
	}
	if after := r.observe(); after.ResourceVersion != before.ResourceVersion {
		r.t.Fatal("the refused step changed the CRD")
	}
	r.t.Logf("refused as it must: %v", err)
	preflight := func() ([]upgrade.CheckResult, error) {
		o := r.observe()
		steps, err := upgrade.Plan(o, r.cfg, crd.StageUnserve)
		if err != nil {
			r.t.Fatal(err)
		}
		return upgrade.Preflight(ctx, r.cl, r.cfg, o, steps)
	}

	// A GET through v1alpha1 now, so the override has something to let through.
	if err := r.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: r.fleet.Name(0)}, &v1alpha1.Widget{}); err != nil {
		r.t.Fatal(err)
	}
	r.cl.Traffic.AllowReason = "walk: the fleet uses v1alpha1 on purpose"
	results, err := preflight()
	r.cl.Traffic.AllowReason = ""
	if err != nil {
		r.t.Fatalf("unserve with the override: %v", err)
	}
	if last := results[len(results)-1]; !strings.Contains(last.Note, "overridden") || !strings.Contains(last.Note, "GET ") {
		r.t.Errorf("the overridden check says %+v", last)
	}
	events := &corev1.EventList{}
	if err := r.env.Client.List(ctx, events, client.InNamespace(metav1.NamespaceDefault)); err != nil {
		r.t.Fatal(err)
	}
	recorded := slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
		return e.Reason == "OldVersionTrafficOverridden" && e.InvolvedObject.Name == crd.WidgetName &&
			strings.Contains(e.Message, "walk: the fleet uses v1alpha1 on purpose") && strings.Contains(e.Message, "GET ")
	})
	if !recorded {
		r.t.Errorf("no OldVersionTrafficOverridden event on the CRD with the reason and the counts: %+v", events.Items)
	}

	time.Sleep(trafficWindow + 500*time.Millisecond)
	results, err = preflight()
	if err != nil {
		r.t.Fatalf("unserve after a window without v1alpha1 requests: %v", err)
	}
	if last := results[len(results)-1]; last.Check != upgrade.CheckOldTraffic || !strings.Contains(last.Note, ": none, counted by 1 kube-apiserver") {
		r.t.Errorf("the passing traffic check says %+v", last)
	}
}

// apply server-side applies the Widget widget-system/applied (outside the fleet's namespace)
// through version with image, as field manager old-applier, and returns the image.
func (r *rig) apply(version, image string) string {
	r.t.Helper()
	spec := map[string]any{"image": image}
	if version == "v1alpha1" {
		spec["replicas"] = int64(1)
	} else {
		spec["size"] = int64(1)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "widgetry.io/" + version, "kind": "Widget",
		"metadata": map[string]any{"name": "applied", "namespace": "widget-system"},
		"spec":     spec,
	}}
	if err := r.env.Client.Patch(context.Background(), u, client.Apply, client.FieldOwner("old-applier"), client.ForceOwnership); err != nil { //nolint:staticcheck // SA1019: the unstructured apply is what an old client sends
		r.t.Fatalf("server-side apply through %s as old-applier: %v", version, err)
	}
	return image
}

// TestRefusals: each refused step leaves the CRD untouched and names the next safe step.
func TestRefusals(t *testing.T) {
	r := newRig(t)
	r.write(crd.StageInitial, 0)
	unchanged := func(t *testing.T, before *upgrade.Observation) {
		t.Helper()
		after := r.observe()
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("the refused step changed the CRD (resourceVersion %s -> %s)", before.ResourceVersion, after.ResourceVersion)
		}
	}
	expect := func(t *testing.T, err error, want ...string) {
		t.Helper()
		if !upgrade.IsRefusal(err) {
			t.Fatalf("want a refusal, got %v", err)
		}
		for _, w := range append(want, "next safe step") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not mention %q", err, w)
			}
		}
	}

	t.Run("skip initial -> flip-storage", func(t *testing.T) {
		before := r.observe()
		expect(t, r.step(crd.StageFlipStorage), "skips 1 stage", "add-version (runbooks/upgrade/add-version.md)")
		unchanged(t, before)
	})
	t.Run("an unknown stage", func(t *testing.T) {
		before := r.observe()
		expect(t, r.step("final"), `unknown stage "final"`)
		unchanged(t, before)
	})
	t.Run("add-version with the webhook down", func(t *testing.T) {
		r.hook.Down.Store(true)
		defer r.hook.Down.Store(false)
		before := r.observe()
		expect(t, r.step(crd.StageAddVersion), "conversion-webhook-probe", "HTTP 503")
		unchanged(t, before)
	})
	if err := r.step(crd.StageAddVersion); err != nil {
		t.Fatal(err)
	}
	t.Run("flip-storage with a certificate the apiserver does not trust", func(t *testing.T) {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := r.env.Client.Get(context.Background(), client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			t.Fatal(err)
		}
		live.Spec.Conversion.Webhook.ClientConfig.CABundle = testcerts.NewCA(t, "another-ca").PEM
		if err := r.env.Client.Update(context.Background(), live); err != nil {
			t.Fatal(err)
		}
		before := r.observe()
		expect(t, r.step(crd.StageFlipStorage), "certificate")
		unchanged(t, before)
		live.Spec.Conversion.Webhook.ClientConfig.CABundle = r.hook.CA.PEM
		if err := r.env.Client.Update(context.Background(), live); err != nil {
			t.Fatal(err)
		}
	})
	if err := r.step(crd.StageFlipStorage); err != nil {
		t.Fatal(err)
	}
	r.write(crd.StageFlipStorage, 1)
	t.Run("unserve with v1alpha1 still stored", func(t *testing.T) {
		before := r.observe()
		o := r.observe()
		steps, err := upgrade.Plan(o, r.cfg, crd.StageUnserve)
		if err != nil {
			t.Fatal(err)
		}
		_, err = upgrade.Preflight(context.Background(), r.cl, r.cfg, o, steps)
		expect(t, err, "stored-versions-only-new", "widgetctl migrate --crd widgets.widgetry.io")
		unchanged(t, before)
	})
	t.Run("drop v1alpha1 from spec.versions while stored", func(t *testing.T) {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := r.env.Client.Get(context.Background(), client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			t.Fatal(err)
		}
		before := r.observe()
		live.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{*crd.Version(live, "v1")}
		expect(t, upgrade.CheckVersionsKept(live), "removing version v1alpha1", "the apiserver would reject")
		unchanged(t, before)
	})
	if err := r.step(crd.StageAddVersion); err != nil { // rollback: v1 objects stay stored
		t.Fatal(err)
	}
	t.Run("rollback add-version -> initial without the reverse migration", func(t *testing.T) {
		before := r.observe()
		expect(t, r.step(crd.StageInitial), "nothing-stored-as-new", "widgetctl migrate --crd widgets.widgetry.io --to v1alpha1", "runbooks/upgrade/add-version.md")
		unchanged(t, before)
	})
	t.Run("the way back from an inconsistent CRD", func(t *testing.T) {
		// v1alpha1 unserved while still stored: a jump made past the chart (this apiserver has
		// no stage guard).
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := r.env.Client.Get(context.Background(), client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			t.Fatal(err)
		}
		if err := crd.ApplyStageFlags(live, crd.StageUnserve); err != nil {
			t.Fatal(err)
		}
		if err := r.env.Client.Update(context.Background(), live); err != nil {
			t.Fatal(err)
		}
		o := r.observe()
		if o.Inconsistent == "" {
			t.Fatalf("observed %s, want inconsistent", o.StageLabel())
		}
		before := r.observe()
		expect(t, r.step(crd.StageUnserve), "does not repair it", "add-version, flip-storage, migrate", "runbooks/upgrade/README.md#inconsistent")
		unchanged(t, before)
		if err := r.step(crd.StageAddVersion); err != nil {
			t.Fatalf("the repair to add-version: %v", err)
		}
		if o := r.observe(); o.Stage != crd.StageAddVersion || o.Inconsistent != "" {
			t.Fatalf("after the repair: %s", o.StageLabel())
		}
		r.verify(crd.StageAddVersion)
	})
}

//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/backup"
	widgetchart "github.com/widgetry/widget-operator/internal/chart"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

const releaseNamespace = "widget-system"

// TestEndToEndWalk is the chart's end-to-end proof on the real node, with Helm 3 and then
// Helm 4 (server-side apply) on the same cluster: install at initial in a namespace enforcing
// Pod Security restricted, with cert-manager's real controllers and cainjector (Certificate
// Ready, caBundle in the CRD and both webhook configurations equal to the issuing CA); a skipped
// stage fails with the preflight's message and changes nothing; helm upgrade one stage at a
// time to remove and helm rollback one at a time to initial (the last only after the reverse
// migration the refusal asks for), with Widgets written through every served version at every
// stage and read back through every served version (0 lost fields); a Widget last applied
// through v1alpha1 is applied through v1 by the same manager at remove; a v1alpha1 manifest
// with endpoints out of name order, applied server-side before the flip, reads back as applied
// (kubectl diff empty) at every stage that serves v1alpha1, after migrate, unserve and every
// step back; helm test; helm uninstall keeps the CRD and every Widget, without the catalog
// finalizer.
func TestEndToEndWalk(t *testing.T) {
	c := cluster.Start(t)
	c.ImportOperatorImage(t)
	c.StartCertManager(t)
	ensureNamespace(t, c, releaseNamespace)
	for _, helm := range []string{"helm3", "helm4"} {
		// Helm 3 walks back with helm rollback; Helm 4 uninstalls at remove, installs again and
		// walks back with helm upgrade.
		if !t.Run(helm, func(t *testing.T) { walk(t, c, filepath.Join(c.Bin, helm), "walk-"+helm, helm == "helm4") }) {
			return
		}
	}
}

// ensureNamespace creates a namespace enforcing Pod Security restricted (idempotently).
func ensureNamespace(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	manifest := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    pod-security.kubernetes.io/enforce: restricted\n", name)
	f := filepath.Join(t.TempDir(), "ns.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Kubectl(t, "apply", "-f", f)
}

// e2e is one walk's state.
type e2e struct {
	t     *testing.T
	c     *cluster.Cluster
	helm  string
	chart string
	cl    client.Client
	ns    string // where the walk's Widgets live
	fleet *widgetenv.Fleet
	// gitops is the v1alpha1 manifest applied server-side before the flip, into gitopsNS.
	gitops, gitopsNS string
}

func walk(t *testing.T, c *cluster.Cluster, helm, widgetNamespace string, viaUninstall bool) {
	// v1alpha1 answers with deprecation warnings from add-version on; they are expected here.
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandlerWithContext = rest.NoWarnings{}
	cl, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(prereq.RepoRoot(t), widgetchart.Dir)
	w := &e2e{t: t, c: c, helm: helm, chart: chart, cl: cl, ns: widgetNamespace,
		fleet: &widgetenv.Fleet{Client: cl, Namespace: widgetNamespace, N: objectsPerWalk()}}
	ensureNamespace(t, c, widgetNamespace)

	start := time.Now()
	install := "image.tag=dev"
	if viaUninstall {
		// The Helm 4 walk's preflights run the census (census_walk_test.go).
		install += ",apiUpgrade.census.rbac=true"
	}
	w.mustHelm("install", "widget-operator", chart, "--set", install, "--wait", "--timeout", "5m")
	t.Logf("helm install --wait: %s", time.Since(start).Round(time.Second))
	w.checkCertificates()
	w.checkStage(crd.StageInitial)
	round := 0
	w.write(crd.StageInitial, round)
	w.verify(crd.StageInitial)
	appliedNamespace := widgetNamespace + "-applied"
	ensureNamespace(t, c, appliedNamespace)
	w.serverSideApply(appliedNamespace, "v1alpha1")
	w.applyGitOps(appliedNamespace)
	w.gitopsUnchanged(crd.StageInitial)
	var apps *userApps
	if viaUninstall {
		apps = w.installUserApps()
	}

	// A skipped stage: refused by the pre-upgrade preflight, with its message, nothing changed.
	before := w.crd()
	out, err := w.runHelm("upgrade", "widget-operator", chart, "--reuse-values", "--set", "apiUpgrade.stage=flip-storage", "--wait", "--timeout", "3m")
	if err == nil {
		t.Fatalf("helm upgrade initial -> flip-storage succeeded:\n%s", out)
	}
	if !strings.Contains(out, "add-version") || !strings.Contains(out, "runbooks/upgrade") {
		t.Errorf("the refused upgrade does not show the preflight's message naming the next step (add-version) and its runbook:\n%s", out)
	}
	if after := w.crd(); !equality.Semantic.DeepEqual(before.Spec, after.Spec) || after.ResourceVersion != before.ResourceVersion {
		t.Error("the refused upgrade changed the CRD")
	}
	// The failed hook's Job and pod stay for kubectl logs (hook-delete-policy keeps failures).
	if logs := w.c.Kubectl(t, "-n", releaseNamespace, "logs", "job/widget-operator-preflight"); !strings.Contains(logs, "add-version") {
		t.Errorf("kubectl logs of the failed preflight Job:\n%s", logs)
	}
	w.verify(crd.StageInitial)

	// revisions is the release revision of each stage, for the way back by helm rollback.
	revisions := map[crd.Stage]int{}
	revisions[crd.StageInitial] = 1
	for _, stage := range crd.Stages[1:] {
		values := "apiUpgrade.stage=" + string(stage)
		if stage == crd.StageUnserve {
			if viaUninstall {
				w.drillBackup()
				apps.refusedAtUnserve()
			}
			values = w.unserveAfterTraffic(viaUninstall)
			if viaUninstall {
				// After the quiet window, what the unserve runbook asks for before the step:
				// the checks and a drilled backup, all reading through v1alpha1 too. The
				// gate subtracts our own requests: the default gate lets unserve through.
				w.runbookChecks()
				w.drillBackup()
			}
		}
		if stage == crd.StageFlipStorage && viaUninstall {
			// Helm 4's walk takes the backup the flip-storage runbook asks for; Helm 3's does
			// not, and its preflight warns.
			w.c.Run(t, filepath.Join(c.Bin, "widgetctl"), "backup", "--out", filepath.Join(t.TempDir(), "backup"), "--records-namespace", releaseNamespace)
		}
		start := time.Now()
		out := w.mustHelm("upgrade", "widget-operator", chart, "--reuse-values", "--set", values, "--wait", "--timeout", "5m")
		t.Logf("helm upgrade to %s: %s", stage, time.Since(start).Round(time.Second))
		if stage == crd.StageUnserve {
			wants := []string{`ok: overridden ("` + undrilledReason + `"): no backup of widgets.widgetry.io is recorded in namespace ` + releaseNamespace + ", so none was drilled"}
			if viaUninstall {
				// Helm 4 logs the hook's output quoted: the quotes around the reason escaped.
				wants = []string{"objects restored and read back", "no-release-manifest-of-old           ok: overridden (", legacyReason, "): 1 place(s) declare widgets through v1alpha1"}
			}
			for _, want := range wants {
				if !strings.Contains(out, want) {
					t.Errorf("helm upgrade to unserve does not print %q:\n%s", want, out)
				}
			}
		}
		if stage == crd.StageFlipStorage {
			want := "WARNING: no backup of widgets.widgetry.io is recorded in namespace " + releaseNamespace
			if viaUninstall {
				want = "ok: backup of map[v1:"
			}
			if !strings.Contains(out, want) {
				t.Errorf("helm upgrade to flip-storage does not print the preflight's %q:\n%s", want, out)
			}
		}
		w.checkStage(stage)
		if stage == crd.StageUnserve && !viaUninstall {
			w.checkOverrideRecorded("e2e walk: the fleet uses v1alpha1 on purpose")
		}
		if stage == crd.StageMigrate {
			if sv := w.crd().Status.StoredVersions; !slices.Equal(sv, []string{"v1"}) {
				t.Errorf("after the migrate hook storedVersions = %v, want [v1]", sv)
			}
		}
		w.verify(stage)
		w.gitopsUnchanged(stage)
		if viaUninstall {
			w.runbookChecks()
		}
		round++
		w.write(stage, round)
		w.verify(stage)
		if len(widgetenv.Served(stage)) > 1 && refuseUninstallIn(stage, viaUninstall) {
			w.refusedUninstall(stage)
		}
		revisions[stage], _ = w.release()
	}
	// The managedFields entry old-applier recorded through v1alpha1 went with the unserve
	// hook: its apply through v1 works now that v1alpha1 is gone (kubernetes#111937).
	w.serverSideApply(appliedNamespace, "v1")
	backFromRemove := []crd.Stage{crd.StageUnserve, crd.StageMigrate, crd.StageFlipStorage, crd.StageAddVersion, crd.StageInitial}

	// back is one step back to stage by helm args (rollback or upgrade), then the checks; the
	// step to initial is first refused until the reverse migration the refusal names has run.
	back := func(stage crd.Stage, args ...string) {
		if stage == crd.StageInitial {
			// v1 is stored: the preflight refuses until the reverse migration.
			out, err := w.runHelm(append(args, "--wait", "--timeout", "3m")...)
			if err == nil {
				t.Fatalf("helm %s to initial with v1 stored succeeded:\n%s", args[0], out)
			}
			if !strings.Contains(out, "--to v1alpha1") {
				t.Errorf("the refused step back does not name the reverse migration:\n%s", out)
			}
			w.c.Run(t, filepath.Join(c.Bin, "widgetctl"), "migrate", "--crd", crd.WidgetName, "--to", "v1alpha1", "--progress-namespace", releaseNamespace)
		}
		start := time.Now()
		w.mustHelm(append(args, "--wait", "--timeout", "5m")...)
		t.Logf("helm %s to %s: %s", args[0], stage, time.Since(start).Round(time.Second))
		w.checkStage(stage)
		w.verify(stage)
		w.gitopsUnchanged(stage)
		round++
		w.write(stage, round)
		w.verify(stage)
	}
	if viaUninstall {
		apps.afterRemove()
		// Uninstall at remove keeps every Widget; a new install at remove takes them over.
		w.uninstallKeepsWidgets(crd.StageRemove)
		w.mustHelm("install", "widget-operator", chart, "--set", "image.tag=dev,apiUpgrade.stage=remove", "--wait", "--timeout", "5m")
		w.checkStage(crd.StageRemove)
		w.verify(crd.StageRemove)
		for _, stage := range backFromRemove {
			back(stage, "upgrade", "widget-operator", chart, "--reuse-values", "--set", "apiUpgrade.stage="+string(stage))
		}
	}

	// Otherwise helm rollback one stage at a time, to the revision each stage had.
	for _, stage := range backFromRemove {
		if viaUninstall {
			break
		}
		back(stage, "rollback", "widget-operator", strconv.Itoa(revisions[stage]))
	}

	out = w.mustHelm("test", "widget-operator", "--timeout", "3m")
	t.Logf("helm test:\n%s", out)

	w.uninstallKeepsWidgets(crd.StageInitial)
}

// refuseUninstallIn says whether the walk tries the refused uninstall at stage: each stage
// where two versions are served once in the tier, the two walks taking turns (Helm 3's
// add-version and migrate, Helm 4's flip-storage), so that both Helms' pre-delete hooks are
// seen refusing and no stage is tried twice.
func refuseUninstallIn(stage crd.Stage, helm4 bool) bool {
	return (stage == crd.StageFlipStorage) == helm4
}

// drillBackup takes the backup the unserve runbook asks for (after the flip) and drills it, as
// on-call would, with the operator reconciling the drilled Widgets meanwhile; it waits until
// the scratch namespaces are gone so that the rest of the walk sees only its own fleet.
func (w *e2e) drillBackup() {
	w.t.Helper()
	dir := filepath.Join(w.t.TempDir(), "after-the-flip")
	bin := filepath.Join(w.c.Bin, "widgetctl")
	w.c.Run(w.t, bin, "backup", "--out", dir, "--records-namespace", releaseNamespace)
	out := w.c.Run(w.t, bin, "restore", "--from", dir, "--drill", "--drill-prefix", "walk-drill", "--records-namespace", releaseNamespace)
	if !strings.Contains(out, "ok: the backup restores every object as it was backed up") {
		w.t.Errorf("the restore drill on the real node:\n%s", out)
	}
	testenv.Eventually(w.t, 3*time.Minute, "the drill's scratch namespaces gone", func() error {
		list := &corev1.NamespaceList{}
		if err := w.cl.List(context.Background(), list, client.MatchingLabels{backup.DrillLabel: "walk-drill"}); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d left", len(list.Items))
		}
		return nil
	})
}

// runbookChecks runs the read-only checks the upgrade runbooks prescribe after each stage,
// each reading (and the round trip dry-run writing) through every served version:
// kubectl widget status (exit 0, or 1 for causes it lists), verify and verify --round-trip.
func (w *e2e) runbookChecks() {
	w.t.Helper()
	bin := filepath.Join(w.c.Bin, "widgetctl")
	ctx, cancel := context.WithTimeout(w.t.Context(), 3*time.Minute)
	defer cancel()
	out, err := w.c.Command(ctx, bin, "status").CombinedOutput()
	if code := exitCode(err); code != 0 && code != 1 {
		w.t.Errorf("widgetctl status: %v\n%s", err, out)
	}
	w.c.Run(w.t, bin, "verify")
	w.c.Run(w.t, bin, "verify", "--round-trip")
}

// unserveAfterTraffic: the walk's fleet wrote and read through v1alpha1 since the storage
// flip, so helm upgrade to unserve is refused by the preflight with the counts, changing
// nothing. It returns the values that let the next try through: with Helm 3 an override with a
// reason (shown in the release's NOTES, recorded as an event on the CRD), with Helm 4 a short
// window that passes once waited out.
func (w *e2e) unserveAfterTraffic(byWindow bool) string {
	w.t.Helper()
	const window = "15s"
	// Helm 3's walk takes no backup: the backup-drilled check is overridden, recorded. Helm 4's
	// leaves legacy on v1alpha1: the census is overridden, recorded.
	override := ",apiUpgrade.backup.allowReason=" + undrilledReason
	if byWindow {
		override = ",apiUpgrade.census.allowReason=" + legacyReason
	}
	before := w.crd()
	out, err := w.runHelm("upgrade", "widget-operator", w.chart, "--reuse-values", "--set", "apiUpgrade.stage=unserve,apiUpgrade.oldVersionTraffic.window="+window+override, "--wait", "--timeout", "5m")
	if err == nil {
		w.t.Fatalf("helm upgrade to unserve after v1alpha1 traffic succeeded:\n%s", out)
	}
	for _, want := range []string{"no-old-version-traffic", "v1alpha1 is still in use", "PUT ", "apiUpgrade.oldVersionTraffic.allowReason"} {
		if !strings.Contains(out, want) {
			w.t.Errorf("the refused upgrade to unserve does not say %q:\n%s", want, out)
		}
	}
	if after := w.crd(); after.ResourceVersion != before.ResourceVersion {
		w.t.Error("the refused upgrade changed the CRD")
	}
	if byWindow {
		d, _ := time.ParseDuration(window)
		time.Sleep(d + 2*time.Second)
		return "apiUpgrade.stage=unserve,apiUpgrade.oldVersionTraffic.window=" + window + override
	}
	return "apiUpgrade.stage=unserve,apiUpgrade.oldVersionTraffic.allowReason=e2e walk: the fleet uses v1alpha1 on purpose" + override
}

// undrilledReason is Helm 3's walk's override of the backup-drilled check.
const undrilledReason = "e2e walk: the Helm 4 walk drills"

// checkOverrideRecorded: the release's NOTES and an event on the CRD say the traffic check was
// overridden, with the reason.
func (w *e2e) checkOverrideRecorded(reason string) {
	w.t.Helper()
	notes := w.mustHelm("get", "notes", "widget-operator")
	if !strings.Contains(notes, "OVERRIDDEN") || !strings.Contains(notes, reason) {
		w.t.Errorf("the release's NOTES do not record the override:\n%s", notes)
	}
	events := w.c.Kubectl(w.t, "get", "events", "-n", "default", "--field-selector", "reason=OldVersionTrafficOverridden", "-o", "jsonpath={.items[*].message}")
	if !strings.Contains(events, reason) || !strings.Contains(events, "PUT ") {
		w.t.Errorf("no OldVersionTrafficOverridden event on the CRD with the reason and the counts: %q", events)
	}
	if !strings.Contains(notes, "backup-drilled check of unserve and remove is OVERRIDDEN") || !strings.Contains(notes, undrilledReason) {
		w.t.Errorf("the release's NOTES do not record the backup-drilled override:\n%s", notes)
	}
	events = w.c.Kubectl(w.t, "get", "events", "-n", "default", "--field-selector", "reason=UndrilledBackupOverridden", "-o", "jsonpath={.items[*].message}")
	if !strings.Contains(events, undrilledReason) {
		w.t.Errorf("no UndrilledBackupOverridden event on the CRD with the reason: %q", events)
	}
}

// serverSideApply applies the Widget applied in namespace through version as field manager
// old-applier, with kubectl (a server-side apply): it fails on an object that keeps a
// managedFields entry of a version the CRD no longer has.
func (w *e2e) serverSideApply(namespace, version string) {
	w.t.Helper()
	size := "size"
	if version == "v1alpha1" {
		size = "replicas"
	}
	manifest := fmt.Sprintf("apiVersion: widgetry.io/%s\nkind: Widget\nmetadata:\n  name: applied\n  namespace: %s\nspec:\n  image: registry.example.com/applied:%s\n  %s: 0\n",
		version, namespace, version, size)
	f := filepath.Join(w.t.TempDir(), "applied.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.c.Kubectl(w.t, "apply", "--server-side", "--field-manager=old-applier", "--force-conflicts", "-f", f)
}

// applyGitOps applies, server-side as a GitOps tool does, the v1alpha1 manifest whose
// endpoints are not in name order (widgetenv.WriteGitOpsManifest), into namespace.
func (w *e2e) applyGitOps(namespace string) {
	w.t.Helper()
	var err error
	if w.gitops, err = widgetenv.WriteGitOpsManifest(w.t.TempDir(), namespace); err != nil {
		w.t.Fatal(err)
	}
	w.gitopsNS = namespace
	w.c.Kubectl(w.t, "apply", "--server-side", "--field-manager=gitops", "-f", w.gitops)
}

// gitopsUnchanged: where v1alpha1 is served, the manifest's Widget reads back as applied,
// endpoints in their order, and kubectl diff of the manifest is empty: a GitOps tool sees no
// drift after the flip, the migration, unserve and every step back.
func (w *e2e) gitopsUnchanged(stage crd.Stage) {
	w.t.Helper()
	if !slices.Contains(widgetenv.Served(stage), "v1alpha1") {
		return
	}
	if err := widgetenv.CheckGitOpsWidget(w.t.Context(), w.cl, w.gitopsNS); err != nil {
		w.t.Fatalf("%s: %v", stage, err)
	}
	ctx, cancel := context.WithTimeout(w.t.Context(), time.Minute)
	defer cancel()
	if out, err := w.c.Command(ctx, filepath.Join(w.c.Bin, "kubectl"), "diff", "--server-side", "--field-manager=gitops", "-f", w.gitops).CombinedOutput(); err != nil {
		w.t.Fatalf("%s: kubectl diff of the applied v1alpha1 manifest is not empty: %v\n%s", stage, err, out)
	}
}

func (w *e2e) runHelm(args ...string) (string, error) {
	if args[0] == "upgrade" || args[0] == "rollback" {
		// Keep every revision: the walk rolls back to its first (Helm keeps 10 by default).
		args = append(args, "--history-max", "0")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := w.c.Command(ctx, w.helm, append(args, "--namespace", releaseNamespace)...).CombinedOutput()
	return string(out), err
}

func (w *e2e) mustHelm(args ...string) string {
	w.t.Helper()
	out, err := w.runHelm(args...)
	if err != nil {
		w.t.Fatalf("%s %s: %v\n%s\n%s", filepath.Base(w.helm), strings.Join(args, " "), err, out,
			w.c.Kubectl(w.t, "-n", releaseNamespace, "get", "pods,jobs,certificates", "-o", "wide"))
	}
	return out
}

func (w *e2e) crd() *apiextensionsv1.CustomResourceDefinition {
	w.t.Helper()
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := w.cl.Get(w.t.Context(), client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		w.t.Fatal(err)
	}
	return c
}

// checkCertificates: the serving Certificate is Ready, its Secret holds a chain of the chart's
// CA, and cainjector put that CA in the CRD and both webhook configurations.
func (w *e2e) checkCertificates() {
	w.t.Helper()
	w.c.Kubectl(w.t, "-n", releaseNamespace, "wait", "certificate/widget-operator-serving", "--for=condition=Ready", "--timeout=2m")
	ctx := w.t.Context()
	issuing := &corev1.Secret{}
	if err := w.cl.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "widget-operator-ca"}, issuing); err != nil {
		w.t.Fatalf("the CA Secret: %v", err)
	}
	serving := &corev1.Secret{}
	if err := w.cl.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "widget-operator-serving-cert"}, serving); err != nil {
		w.t.Fatalf("the serving Secret: %v", err)
	}
	ca := issuing.Data["tls.crt"]
	if len(ca) == 0 || !bytes.Equal(serving.Data["ca.crt"], ca) {
		w.t.Fatal("the serving Secret's ca.crt is not the chart's CA")
	}
	testenv.Eventually(w.t, time.Minute, "caBundle injected into the CRD, MWC and VWC", func() error {
		bundles := map[string][]byte{}
		if c := w.crd(); c.Spec.Conversion != nil && c.Spec.Conversion.Webhook != nil && c.Spec.Conversion.Webhook.ClientConfig != nil {
			bundles["CRD"] = c.Spec.Conversion.Webhook.ClientConfig.CABundle
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := w.cl.Get(ctx, client.ObjectKey{Name: "widget-operator"}, mwc); err != nil {
			return err
		}
		bundles["MutatingWebhookConfiguration"] = mwc.Webhooks[0].ClientConfig.CABundle
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := w.cl.Get(ctx, client.ObjectKey{Name: "widget-operator"}, vwc); err != nil {
			return err
		}
		bundles["ValidatingWebhookConfiguration"] = vwc.Webhooks[0].ClientConfig.CABundle
		for what, b := range bundles {
			if !bytes.Equal(bytes.TrimSpace(b), bytes.TrimSpace(ca)) {
				return fmt.Errorf("%s caBundle %q is not the issuing CA", what, base64.StdEncoding.EncodeToString(b))
			}
		}
		if len(bundles) != 3 {
			return fmt.Errorf("only %d of 3 caBundles", len(bundles))
		}
		return nil
	})
}

// checkStage: the live CRD's versions are crd.ApplyStageFlags' for stage.
func (w *e2e) checkStage(stage crd.Stage) {
	w.t.Helper()
	want := crd.Widget()
	if err := crd.ApplyStageFlags(want, stage); err != nil {
		w.t.Fatal(err)
	}
	if got := w.crd(); !equality.Semantic.DeepEqual(want.Spec.Versions, got.Spec.Versions) {
		w.t.Fatalf("stage %s: the live CRD's versions differ from crd.ApplyStageFlags", stage)
	}
}

func objectsPerWalk() int {
	if n, err := strconv.Atoi(os.Getenv("WIDGET_E2E_OBJECTS")); err == nil && n > 0 {
		return n
	}
	return 24
}

// write and verify run the walk's Fleet at stage, failing the test on error.
func (w *e2e) write(stage crd.Stage, round int) {
	w.t.Helper()
	if err := w.fleet.Write(w.t.Context(), widgetenv.Served(stage), round); err != nil {
		w.t.Fatalf("%s: %v", stage, err)
	}
}

func (w *e2e) verify(stage crd.Stage) {
	w.t.Helper()
	if err := w.fleet.Verify(w.t.Context(), widgetenv.Served(stage)); err != nil {
		w.t.Fatalf("%s: %v", stage, err)
	}
}

// exitCode is a finished command's exit code: 0 without error, -1 when it did not run.
func exitCode(err error) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	return -1
}

//go:build envtest

package cli_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/cli"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/testenv/userapps"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestCensusAndMigrateRelease: two users' releases template a v1alpha1 Widget, one installed
// with Helm 4 (Secret driver), one with Helm 3 (ConfigMap driver). census lists both with
// their Widgets; after remove, helm upgrade of each to a chart that templates v1 fails on the
// stored manifest (the negative control), migrate-release --dry-run shows the change and
// writes nothing, migrate-release rewrites the records (backed up first), census is clean and
// helm upgrade succeeds with both Helms.
func TestCensusAndMigrateRelease(t *testing.T) {
	env, _ := widgetenv.StartAtStage(t, crd.StageAddVersion, testenv.Options{})
	ctx := context.Background()
	for _, ns := range []string{"widget-system", "shop", "legacy"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	releases := []struct {
		name, helm string
		driver     []string
	}{
		{"shop", prereq.Tool(t, "helm4"), nil},
		{"legacy", prereq.Tool(t, "helm3"), []string{"HELM_DRIVER=configmap"}},
	}
	for _, r := range releases {
		helm := testenv.HelmOn(t, env, r.name, r.driver...)
		if out, err := helm(t, r.helm, "install", r.name, userapps.Chart(t, r.name, "widgetry.io/v1alpha1", 2)); err != nil {
			t.Fatalf("helm install %s: %v\n%s", r.name, err, out)
		}
	}
	// An Argo CD Application and a Flux Kustomization that applied a v1alpha1 Widget, their
	// CRDs as those projects publish them.
	userapps.InstallGitOpsCRDs(t, env.Config)
	gitops := userapps.GitOpsInventories(t, env.Client)
	gitops("v1alpha1")

	expect := expectExit(t, env)
	out := expect(cli.ExitRefused, "census")
	for _, want := range []string{"Helm release legacy/legacy revision 1 (deployed, ConfigMap driver): legacy/web (legacy/templates/widget.yaml)",
		"Helm release shop/shop revision 1 (deployed, Secret driver): shop/web (shop/templates/widget.yaml)",
		"Argo CD Application argocd/shop-gitops: gitops/web", "Flux Kustomization flux-system/shop-gitops: gitops/web",
		"4 place(s) declare Widgets through v1alpha1", "widgetctl migrate-release legacy -n legacy; widgetctl migrate-release shop -n shop; change the manifests of Argo CD Application argocd/shop-gitops to widgetry.io/v1 and sync it"} {
		if !strings.Contains(out, want) {
			t.Errorf("census lacks %q:\n%s", want, out)
		}
	}

	// The walk to remove, as the runbooks do it (the managedFields of v1alpha1 dropped at unserve).
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range []crd.Stage{crd.StageFlipStorage, crd.StageMigrate, crd.StageUnserve, crd.StageRemove} {
		setStage(t, env, stage)
		switch stage {
		case crd.StageMigrate:
			migrateAll(t, env)
			// The preflight of unserve runs the census and refuses, naming each release and the
			// command that moves it; an override is taken with its reason, recorded on the CRD.
			preflight := []string{"upgrade", "preflight", "--to", "unserve", "--records-namespace", "widget-system", "--apiserver-instances=" + u.Host}
			out := expect(cli.ExitRefused, preflight...)
			for _, want := range []string{"no-release-manifest-of-old: 4 place(s) declare widgets through v1alpha1", "Helm release shop/shop revision 1",
				"widgetctl migrate-release legacy -n legacy; widgetctl migrate-release shop -n shop", "Flux Kustomization flux-system/shop-gitops to v1 and reconcile it", "apiUpgrade.census.allowReason"} {
				if !strings.Contains(out, want) {
					t.Errorf("preflight --to unserve with v1alpha1 releases lacks %q:\n%s", want, out)
				}
			}
			out = expect(cli.ExitRefused, append(preflight, "--allow-old-release-manifests=census test")...)
			if !strings.Contains(out, `ok: overridden ("census test"): 4 place(s)`) || !strings.Contains(out, "backup-drilled") {
				t.Errorf("preflight --to unserve with the census overridden (the backup-drilled check refuses next):\n%s", out)
			}
			events := &corev1.EventList{}
			if err := env.Client.List(ctx, events, client.InNamespace("default")); err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
				return e.Reason == "OldReleaseManifestsOverridden" && strings.Contains(e.Message, "census test")
			}) {
				t.Errorf("no OldReleaseManifestsOverridden event with the reason: %+v", events.Items)
			}
		case crd.StageUnserve:
			expect(cli.ExitDone, "migrate", "--crd", crd.WidgetName, "--progress-namespace", "widget-system", "--apiserver-instances="+u.Host, "--drop-managed-fields-of", "v1alpha1")
		}
	}

	for _, r := range releases {
		helm := testenv.HelmOn(t, env, r.name, r.driver...)
		v1Chart := userapps.Chart(t, r.name, "widgetry.io/v1", 2)
		// The negative control: the stored manifest names a version the CRD no longer has.
		if out, err := helm(t, r.helm, "upgrade", r.name, v1Chart); err == nil || !strings.Contains(out, "unable to build kubernetes objects from current release manifest") || !strings.Contains(out, "widgetry.io/v1alpha1") {
			t.Fatalf("helm upgrade %s before migrate-release: %v, want the removed-API failure\n%s", r.name, err, out)
		}
		t.Setenv("HELM_DRIVER", strings.TrimPrefix(strings.Join(r.driver, ""), "HELM_DRIVER="))
		out := expect(cli.ExitDone, "migrate-release", r.name, "-n", r.name, "--dry-run")
		for _, want := range []string{"revision 1: Widget web (" + r.name + "/templates/widget.yaml)", "- apiVersion: widgetry.io/v1alpha1", "+ apiVersion: widgetry.io/v1",
			"+   size: 2", "+   timeout: 45s", "+     widgetry.io/v1alpha1-endpoint-order: http,admin", "nothing was written"} {
			if !strings.Contains(out, want) {
				t.Errorf("migrate-release %s --dry-run lacks %q:\n%s", r.name, want, out)
			}
		}
		backupDir := filepath.Join(t.TempDir(), "records")
		out = expect(cli.ExitDone, "migrate-release", r.name, "-n", r.name, "--backup-dir", backupDir)
		if !strings.Contains(out, "rewrote 1 Widget(s) in 1 revision(s) of Helm release "+r.name+"/"+r.name+" to v1") {
			t.Errorf("migrate-release %s: %s", r.name, out)
		}
		// Helm 4 applies server-side: the ownership its v1alpha1 entry held (dropped at unserve)
		// is taken back through v1, or its next apply of a changed field conflicts. Helm 3's
		// three-way merge needs none.
		if took := strings.Contains(out, "applied Widget "+r.name+"/web through v1 as field manager helm"); took != (r.name == "shop") {
			t.Errorf("migrate-release %s: took over the fields %t:\n%s", r.name, took, out)
		}
		if b, err := os.ReadFile(filepath.Join(backupDir, "sh.helm.release.v1."+r.name+".v1.json")); err != nil || strings.Contains(string(b), "resourceVersion") {
			t.Errorf("the backup of the release record: %v\n%s", err, b)
		}
		if out := expect(cli.ExitDone, "migrate-release", r.name, "-n", r.name); !strings.Contains(out, "nothing to do") {
			t.Errorf("a second migrate-release: %s", out)
		}
		if out, err := helm(t, r.helm, "upgrade", r.name, v1Chart); err != nil {
			t.Fatalf("helm upgrade %s after migrate-release: %v\n%s", r.name, err, out)
		}
		w := &v1.Widget{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: r.name, Name: "web"}, w); err != nil || w.Spec.Image != "srv:2" {
			t.Errorf("%s/web after the upgrade: %+v %v", r.name, w.Spec, err)
		}
	}
	t.Setenv("HELM_DRIVER", "")
	if out := expect(cli.ExitRefused, "census"); !strings.Contains(out, "2 place(s) declare Widgets through v1alpha1") || strings.Contains(out, "Helm release") {
		t.Errorf("census with the releases moved, the GitOps manifests not yet: %s", out)
	}
	gitops("v1") // their manifests changed to v1 and synced
	if out := expect(cli.ExitDone, "census"); !strings.Contains(out, "ok: no Helm release revision or GitOps inventory declares a Widget through v1alpha1") {
		t.Errorf("census after migrate-release: %s", out)
	}
	if out := expect(cli.ExitRefused, "migrate-release", "nope", "-n", "shop"); !strings.Contains(out, "read Helm release nope in namespace shop") {
		t.Errorf("migrate-release of a release that does not exist: %s", out)
	}
}

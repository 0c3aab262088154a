//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/widgetry/widget-operator/internal/testenv/userapps"
)

// The census proof of the Helm 4 walk: users' manifests that still declare a v1alpha1 Widget,
// on the real node. Two users' releases template one (shop with Helm 4 and its Secret driver,
// legacy with Helm 3 and the ConfigMap driver), and an Argo CD Application and a Flux
// Kustomization list one in their inventories. unserve is refused naming all four; shop is
// moved with migrate-release and the GitOps tools sync to v1; legacy is let through with a
// recorded reason. After remove, helm upgrade of shop works, and of legacy fails on its stored
// manifest (the negative control).

// legacyReason is the walk's census override: legacy is left on v1alpha1 on purpose.
const legacyReason = "e2e walk: legacy stays on v1alpha1 as the negative control"

// userRelease is a user's release of a chart templating one Widget.
type userRelease struct {
	name, namespace, helm string
	env                   []string
}

var userReleases = []userRelease{
	{name: "shop", namespace: "user-shop", helm: "helm4"},
	{name: "legacy", namespace: "user-legacy", helm: "helm3", env: []string{"HELM_DRIVER=configmap"}},
}

// userApps is the users' side; gitops sets the version the GitOps inventories list.
type userApps struct {
	w      *e2e
	gitops func(version string)
}

// installUserApps installs both releases through v1alpha1 and the GitOps objects.
func (w *e2e) installUserApps() *userApps {
	w.t.Helper()
	userapps.InstallGitOpsCRDs(w.t, w.c.Config)
	u := &userApps{w: w, gitops: userapps.GitOpsInventories(w.t, w.cl)}
	u.gitops("v1alpha1")
	for _, r := range userReleases {
		if out, err := u.helm(r, "install", r.name, userapps.Chart(w.t, r.name, "widgetry.io/v1alpha1", 0), "--create-namespace"); err != nil {
			w.t.Fatalf("%s install %s: %v\n%s", r.helm, r.name, err, out)
		}
	}
	return u
}

func (u *userApps) helm(r userRelease, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(u.w.t.Context(), 5*time.Minute)
	defer cancel()
	cmd := u.w.c.Command(ctx, filepath.Join(u.w.c.Bin, r.helm), append(args, "--namespace", r.namespace)...)
	cmd.Env = append(cmd.Env, r.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// refusedAtUnserve: helm upgrade to unserve is refused by the census, naming every place and
// the command that moves each release, and changes nothing; then shop is moved and the GitOps
// tools sync to v1.
func (u *userApps) refusedAtUnserve() {
	w := u.w
	w.t.Helper()
	before := w.crd()
	out, err := w.runHelm("upgrade", "widget-operator", w.chart, "--reuse-values", "--set", "apiUpgrade.stage=unserve", "--wait", "--timeout", "5m")
	if err == nil {
		w.t.Fatalf("helm upgrade to unserve with users' v1alpha1 manifests succeeded:\n%s", out)
	}
	for _, want := range []string{"no-release-manifest-of-old: 4 place(s) declare widgets through v1alpha1",
		"Helm release user-shop/shop revision 1", "Helm release user-legacy/legacy revision 1",
		"Argo CD Application argocd/shop-gitops", "Flux Kustomization flux-system/shop-gitops",
		"widgetctl migrate-release legacy -n user-legacy; widgetctl migrate-release shop -n user-shop", "apiUpgrade.census.allowReason"} {
		if !strings.Contains(out, want) {
			w.t.Errorf("the census refusal at unserve lacks %q:\n%s", want, out)
		}
	}
	if after := w.crd(); after.ResourceVersion != before.ResourceVersion {
		w.t.Error("the refused upgrade changed the CRD")
	}
	bin := filepath.Join(w.c.Bin, "widgetctl")
	if out := w.c.Run(w.t, bin, "migrate-release", "shop", "-n", "user-shop", "--backup-dir", filepath.Join(w.t.TempDir(), "records")); !strings.Contains(out, "rewrote 1 Widget(s) in 1 revision(s) of Helm release user-shop/shop to v1") {
		w.t.Errorf("migrate-release shop:\n%s", out)
	}
	u.gitops("v1")
	ctx, cancel := context.WithTimeout(w.t.Context(), 2*time.Minute)
	defer cancel()
	out2, err := w.c.Command(ctx, bin, "census").CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out2), "1 place(s) declare Widgets through v1alpha1") || !strings.Contains(string(out2), "user-legacy/legacy") {
		w.t.Errorf("census after moving shop and syncing the GitOps tools: %v\n%s", err, out2)
	}
}

// afterRemove: shop, moved, upgrades to a chart templating v1; legacy, not moved, cannot be
// upgraded (Helm cannot build its stored manifest).
func (u *userApps) afterRemove() {
	w := u.w
	w.t.Helper()
	for _, r := range userReleases {
		out, err := u.helm(r, "upgrade", r.name, userapps.Chart(w.t, r.name, "widgetry.io/v1", 0), "--history-max", "0")
		switch {
		case r.name == "shop" && err != nil:
			w.t.Errorf("%s upgrade of the moved release shop after remove: %v\n%s", r.helm, err, out)
		case r.name == "legacy" && (err == nil || !strings.Contains(out, "unable to build kubernetes objects from current release manifest")):
			w.t.Errorf("%s upgrade of legacy (not moved) after remove: %v, want Helm's failure on the stored manifest\n%s", r.helm, err, out)
		}
	}
}

package upgrade

import (
	"context"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/widgetry/widget-operator/internal/census"
	"github.com/widgetry/widget-operator/internal/crd"
)

// oldManifests refuses while a Helm release revision, an Argo CD Application or a Flux
// Kustomization declares an object of the CRD through Old: once Old is gone, Helm can neither
// upgrade nor roll back that release, a GitOps tool applying that manifest fails, and the
// traffic window does not see a release upgraded once a month. Sources the census may not
// read (Helm's records, for the chart's hooks unless apiUpgrade.census.rbac grants it) make a
// warning that names the command to run as a cluster admin. An override with a reason is
// recorded as a Warning event on the CRD.
func oldManifests(ctx context.Context, cl Clients, cfg Config, live *apiextensionsv1.CustomResourceDefinition, to crd.Stage) (string, error) {
	byHand := fmt.Sprintf("run kubectl widget census as a cluster admin before %s (%s)", to, cfg.Runbook(to))
	if cl.Census == nil {
		return "WARNING: the census of Helm releases and GitOps inventories was not run here; " + byHand, nil
	}
	r, err := cl.Census(live.Spec.Group+"/"+cfg.Old, live.Spec.Names.Kind)
	if err != nil {
		return "", fmt.Errorf("the census of Helm releases and GitOps inventories failed: %w", err)
	}
	unread := ""
	if len(r.Unread) > 0 {
		unread = fmt.Sprintf("WARNING: the census may not read %s here (the chart grants its hooks Helm's records with apiUpgrade.census.rbac=true); %s",
			strings.Join(r.Unread, ", "), byHand)
	}
	if len(r.Found) == 0 {
		if unread != "" {
			return unread, nil
		}
		return fmt.Sprintf("no Helm release revision or GitOps inventory declares a %s through %s", live.Spec.Names.Kind, cfg.Old), nil
	}
	lines := make([]string, 0, len(r.Found))
	for _, f := range r.Found {
		lines = append(lines, f.String())
	}
	problem := fmt.Errorf("%d place(s) declare %s through %s, which could no longer be upgraded, rolled back or applied once %s is gone: %s; move each: %s",
		len(r.Found), live.Spec.Names.Plural, cfg.Old, cfg.Old, strings.Join(lines, "; "), census.Fixes(r.Found, cfg.New))
	if cl.AllowOldManifestsReason == "" {
		return "", problem
	}
	note := fmt.Sprintf("overridden (%q): %v", cl.AllowOldManifestsReason, problem)
	if unread != "" {
		note += "; " + unread
	}
	if err := recordOverride(ctx, cl.Client, live, to, "OldReleaseManifestsOverridden", note); err != nil {
		return "", fmt.Errorf("the override of the census could not be recorded, so it is not taken: %w", err)
	}
	return note, nil
}

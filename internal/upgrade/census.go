package upgrade

import (
	"context"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/widgetry/widget-operator/internal/census"
	"github.com/widgetry/widget-operator/internal/crd"
)

// oldManifests refuses while a Helm release revision declares an object of the CRD through
// Old: once Old is gone, Helm can neither upgrade nor roll back that release, and the traffic
// window does not see a release upgraded once a month. Where the census may not read Helm's
// records (the chart's hooks, unless apiUpgrade.census.rbac grants it), the check warns and
// names the command to run as a cluster admin. An override with a reason is recorded as a
// Warning event on the CRD.
func oldManifests(ctx context.Context, cl Clients, cfg Config, live *apiextensionsv1.CustomResourceDefinition, to crd.Stage) (string, error) {
	byHand := fmt.Sprintf("run kubectl widget census as a cluster admin before %s (%s)", to, cfg.Runbook(to))
	if cl.Census == nil {
		return "WARNING: the census of Helm releases was not run here; " + byHand, nil
	}
	found, err := cl.Census(live.Spec.Group+"/"+cfg.Old, live.Spec.Names.Kind)
	switch {
	case apierrors.IsForbidden(err):
		return "WARNING: the census may not read Helm's release records here (list Secrets and ConfigMaps in every namespace; the chart grants it to its hooks with apiUpgrade.census.rbac=true); " + byHand, nil
	case err != nil:
		return "", fmt.Errorf("the census of Helm releases failed: %w", err)
	case len(found) == 0:
		return "no Helm release revision declares a " + live.Spec.Names.Kind + " through " + cfg.Old, nil
	}
	lines := make([]string, 0, len(found))
	for _, f := range found {
		lines = append(lines, f.String())
	}
	problem := fmt.Errorf("%d Helm release revision(s) declare %s through %s, which Helm could no longer upgrade or roll back once %s is gone: %s; move each: %s",
		len(found), live.Spec.Names.Plural, cfg.Old, cfg.Old, strings.Join(lines, "; "), migrateCommands(found))
	if cl.AllowOldManifestsReason == "" {
		return "", problem
	}
	note := fmt.Sprintf("overridden (%q): %v", cl.AllowOldManifestsReason, problem)
	if err := recordOverride(ctx, cl.Client, live, to, "OldReleaseManifestsOverridden", note); err != nil {
		return "", fmt.Errorf("the override of the census could not be recorded, so it is not taken: %w", err)
	}
	return note, nil
}

// migrateCommands is one migrate-release command per release found.
func migrateCommands(found []census.Finding) string {
	seen := map[string]bool{}
	var out []string
	for _, f := range found {
		c := fmt.Sprintf("widgetctl migrate-release %s -n %s", f.Release, f.Namespace)
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return strings.Join(out, "; ")
}

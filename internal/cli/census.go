package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/census"
)

// NewCensusCommand builds `widgetctl census`.
func NewCensusCommand(g *GlobalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "census",
		Short: "List every Helm release revision whose stored manifest still declares a Widget through v1alpha1",
		Long: `census reads every revision Helm keeps of every release in every namespace (Secret and
ConfigMap drivers, the current revision and every one a rollback could return to) and lists
those whose manifest declares a Widget through widgetry.io/v1alpha1, with the Widgets and
their templates. Once v1alpha1 is removed from the CRD, Helm can neither upgrade nor roll back
such a release ("unable to build kubernetes objects from current release manifest"): move it
with widgetctl migrate-release NAME -n NAMESPACE (and move its chart to v1) before unserve.

It needs list on Secrets and ConfigMaps in every namespace (Helm's release records); the
chart does not grant that to any of its ServiceAccounts. Run it as a cluster admin.

Exit codes: 0 none found, 1 some found (each listed), 2 could not read.`,
		Example: `  kubectl widget census
  kubectl widget census -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := g.RESTConfig()
			if err != nil {
				return err
			}
			cs, err := g.Clientset(rc)
			if err != nil {
				return err
			}
			found, err := census.HelmReleases(cs, v1alpha1.GroupVersion.String(), "Widget")
			if err != nil {
				return err
			}
			if found == nil {
				found = []census.Finding{}
			}
			if err := printReport(g, found, func() {
				for _, f := range found {
					fmt.Fprintln(g.Stdout, f.String())
				}
				if len(found) == 0 {
					fmt.Fprintln(g.Stdout, "ok: no Helm release revision declares a Widget through v1alpha1")
				}
			}); err != nil {
				return err
			}
			if len(found) > 0 {
				return refused(fmt.Errorf("%d Helm release revision(s) declare Widgets through v1alpha1; for each release: widgetctl migrate-release NAME -n NAMESPACE, and move its chart to widgetry.io/v1 (runbooks/upgrade/unserve.md)", len(found)))
			}
			return nil
		},
	}
	return cmd
}

package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/census"
)

// NewCensusCommand builds `widgetctl census`.
func NewCensusCommand(g *GlobalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "census",
		Short: "List every Helm release revision and GitOps inventory that still declares a Widget through v1alpha1",
		Long: `census finds every place that still declares a Widget through widgetry.io/v1alpha1:

- every revision Helm keeps of every release in every namespace (Secret and ConfigMap drivers,
  the current revision and every one a rollback could return to; Flux HelmReleases too, which
  helm-controller stores the same way), with the Widgets and their templates. Once v1alpha1 is
  removed from the CRD, Helm can neither upgrade nor roll back such a release ("unable to build
  kubernetes objects from current release manifest"): move it with widgetctl migrate-release
  NAME -n NAMESPACE (and move its chart to v1);
- every Argo CD Application (status.resources) and Flux Kustomization (status.inventory) that
  applied a v1alpha1 Widget, where the cluster serves those APIs: change its manifests to v1.

It needs list on Secrets and ConfigMaps in every namespace (Helm's release records), and on
Argo CD Applications and Flux Kustomizations where they exist; the chart grants none of that
to its ServiceAccounts unless apiUpgrade.census.rbac is set. Run it as a cluster admin.

Exit codes: 0 none found, 1 some found (each listed), 2 could not read (a source it may not
read is named).`,
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
			c, err := widgetClient(g)
			if err != nil {
				return err
			}
			r, err := census.Run(cmd.Context(), cs, c, v1alpha1.GroupVersion.String(), "Widget")
			if err != nil {
				return err
			}
			if err := printReport(g, r, func() {
				for _, f := range r.Found {
					fmt.Fprintln(g.Stdout, f.String())
				}
				for _, u := range r.Unread {
					fmt.Fprintln(g.Stdout, "NOT READ", u)
				}
				if len(r.NotServed) > 0 {
					fmt.Fprintf(g.Stdout, "not served here, nothing to read: %s\n", strings.Join(r.NotServed, ", "))
				}
				if len(r.Found) == 0 && len(r.Unread) == 0 {
					fmt.Fprintln(g.Stdout, "ok: no Helm release revision or GitOps inventory declares a Widget through v1alpha1")
				}
			}); err != nil {
				return err
			}
			switch {
			case len(r.Found) > 0:
				return refused(fmt.Errorf("%d place(s) declare Widgets through v1alpha1; move each: %s (runbooks/upgrade/unserve.md)", len(r.Found), census.Fixes(r.Found, "widgetry.io/v1")))
			case len(r.Unread) > 0:
				return fmt.Errorf("could not read %s: run the census as a cluster admin", strings.Join(r.Unread, ", "))
			}
			return nil
		},
	}
	return cmd
}

package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/finalizers"
)

// NewCleanupFinalizersCommand builds `widgetctl cleanup-finalizers`, the chart's pre-delete hook.
func NewCleanupFinalizersCommand(g *GlobalOptions) *cobra.Command {
	var crdName, finalizer string
	cmd := &cobra.Command{
		Use:   "cleanup-finalizers",
		Short: "Remove a finalizer from every object of a CRD (the chart runs it on uninstall)",
		Long: `With the operator uninstalled nothing would remove the widgetry.io/catalog-cleanup
finalizer, and deleting a Widget, or its namespace, would hang in Terminating. The chart's
pre-delete hook runs this; the catalog itself goes with the release.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if crdName == "" || finalizer == "" {
				return refused(errors.New("--crd and --finalizer are required"))
			}
			rc, err := g.RESTConfig()
			if err != nil {
				return err
			}
			c, err := client.New(rc, client.Options{Scheme: upgradeScheme()})
			if err != nil {
				return err
			}
			md, err := metadata.NewForConfig(rc)
			if err != nil {
				return err
			}
			n, err := finalizers.RemoveFromAll(cmd.Context(), c, md, crdName, finalizer)
			fmt.Fprintf(g.Stdout, "removed %s from %d object(s) of %s\n", finalizer, n, crdName)
			return err
		},
	}
	cmd.Flags().StringVar(&crdName, "crd", crd.WidgetName, "name of the CustomResourceDefinition")
	cmd.Flags().StringVar(&finalizer, "finalizer", controller.Finalizer, "the finalizer to remove")
	return cmd
}

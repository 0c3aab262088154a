package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/finalizers"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// cleanupSettle is how long the manager gets to see the pause marker before the finalizers
// are removed; the passes after it catch a reconcile that was already under way.
const cleanupSettle = 2 * time.Second

// NewCleanupFinalizersCommand builds `widgetctl cleanup-finalizers`, the chart's pre-delete hook.
func NewCleanupFinalizersCommand(g *GlobalOptions) *cobra.Command {
	var crdName, finalizer, operatorNamespace, operatorDeployment string
	var timeout time.Duration
	var allowUnsafe bool
	cmd := &cobra.Command{
		Use:   "cleanup-finalizers",
		Short: "Remove a finalizer from every object of a CRD (the chart runs it on uninstall)",
		Long: `With the operator uninstalled nothing would remove the widgetry.io/catalog-cleanup
finalizer, and deleting a Widget, or its namespace, would hang in Terminating. The chart's
pre-delete hook runs this while the manager still serves its webhooks. With
--operator-namespace and --operator-deployment it first pauses the controller (a marker
ConfigMap owned by the manager's Deployment, so it goes with the release), which would
otherwise add the finalizer straight back, and afterwards deletes the catalog entries.

Before any change it refuses while the CRD serves more than one version through its conversion
webhook (stages add-version, flip-storage, migrate): the webhook goes with the release, and
reads needing a conversion, garbage collection and namespace deletion would fail. If anything
fails after the pause, the pause is lifted again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if crdName == "" || finalizer == "" {
				return refused(errors.New("--crd and --finalizer are required"))
			}
			if (operatorNamespace == "") != (operatorDeployment == "") {
				return refused(errors.New("--operator-namespace and --operator-deployment go together"))
			}
			rc, err := g.RESTConfig()
			if err != nil {
				return err
			}
			c, err := g.NewClient(rc, scheme.New())
			if err != nil {
				return err
			}
			md, err := metadata.NewForConfig(rc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := checkUninstall(ctx, g, c, crdName, allowUnsafe); err != nil {
				return err
			}
			if operatorNamespace == "" {
				total, err := removeUntilStable(ctx, c, md, crdName, finalizer)
				fmt.Fprintf(g.Stdout, "removed %s from %d object(s) of %s\n", finalizer, total, crdName)
				return err
			}
			if err := controller.PauseReconciliation(ctx, c, operatorNamespace, operatorDeployment); err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "paused the controller (%s/%s)\n", operatorNamespace, controller.PausedConfigMap)
			err = cleanupPaused(ctx, g, c, md, crdName, finalizer, operatorNamespace)
			if err != nil {
				// The release stays (a failed pre-delete hook stops helm uninstall): it must not
				// stay paused. A fresh context: ctx may be what ran out.
				resumeCtx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 30*time.Second)
				defer cancel()
				if rerr := controller.ResumeReconciliation(resumeCtx, c, operatorNamespace); rerr != nil {
					return fmt.Errorf("%w; and the controller could not be resumed, delete ConfigMap %s/%s by hand: %w", err, operatorNamespace, controller.PausedConfigMap, rerr)
				}
				fmt.Fprintf(g.Stdout, "resumed the controller after the failure\n")
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&crdName, "crd", crd.WidgetName, "name of the CustomResourceDefinition")
	fl.StringVar(&finalizer, "finalizer", controller.Finalizer, "the finalizer to remove")
	fl.StringVar(&operatorNamespace, "operator-namespace", "", "the operator's namespace: pause its controller first and delete its catalog entries after")
	fl.StringVar(&operatorDeployment, "operator-deployment", "", "the manager's Deployment, which owns the pause marker")
	fl.DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	fl.BoolVar(&allowUnsafe, "allow-unsafe-uninstall", false, "proceed even while the CRD serves several versions through its conversion webhook (reads needing conversion fail once the webhook is gone)")
	return cmd
}

// checkUninstall refuses, before any change, an uninstall that would leave reads of the CRD
// depending on a conversion webhook about to be deleted (upgrade.CheckUninstall).
func checkUninstall(ctx context.Context, g *GlobalOptions, c client.Reader, crdName string, allowUnsafe bool) error {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("read CRD %s: %w", crdName, err)
	}
	err := upgrade.CheckUninstall(live)
	if err != nil && allowUnsafe {
		fmt.Fprintf(g.Stdout, "WARNING: --allow-unsafe-uninstall: going on although %v\n", err)
		return nil
	}
	return asExit(err)
}

// cleanupPaused removes the finalizer and the catalog with the controller paused.
func cleanupPaused(ctx context.Context, g *GlobalOptions, c client.Client, md metadata.Interface, crdName, finalizer, operatorNamespace string) error {
	time.Sleep(cleanupSettle)
	total, err := removeUntilStable(ctx, c, md, crdName, finalizer)
	fmt.Fprintf(g.Stdout, "removed %s from %d object(s) of %s\n", finalizer, total, crdName)
	if err != nil {
		return err
	}
	n, err := controller.DeleteCatalog(ctx, c, operatorNamespace)
	fmt.Fprintf(g.Stdout, "deleted %d catalog entr(ies) in %s\n", n, operatorNamespace)
	return err
}

// removeUntilStable removes the finalizer in passes until a pass finds none left: a
// reconcile under way when the controller was paused may still add it once.
func removeUntilStable(ctx context.Context, c client.Reader, md metadata.Interface, crdName, finalizer string) (int, error) {
	total := 0
	for pass := 1; ; pass++ {
		n, err := finalizers.RemoveFromAll(ctx, c, md, crdName, finalizer)
		total += n
		if err != nil || (n == 0 && pass > 1) {
			return total, err
		}
		select {
		case <-ctx.Done():
			return total, fmt.Errorf("the finalizer keeps coming back (is the controller paused?): %w", ctx.Err())
		case <-time.After(cleanupSettle):
		}
	}
}

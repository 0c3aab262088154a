package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/handover"
)

// NewHandoverCommand builds `widgetctl handover prepare|finish`, the chart's hooks around the
// upgrade from the single-Deployment layout to the two planes (internal/handover).
func NewHandoverCommand(g *GlobalOptions) *cobra.Command {
	var r handover.Release
	var timeout, settle time.Duration
	cmd := &cobra.Command{
		Use:   "handover",
		Short: "Move a release from the single-Deployment layout to the webhook and controller planes without a moment with no webhook replica (the chart's upgrade hooks)",
		Args:  cobra.NoArgs,
	}
	// step is a subcommand that runs do with the client every command writes with.
	step := func(use, short string, do func(ctx context.Context, c client.Client, r handover.Release) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				c, err := widgetClient(g)
				if err != nil {
					return err
				}
				r.Namespace = g.Namespace()
				return do(cmd.Context(), c, r)
			}}
	}
	cmd.AddCommand(
		step("prepare", "Keep the old Deployment through helm upgrade and let the new webhook Service select its pods (pre-upgrade)",
			func(ctx context.Context, c client.Client, r handover.Release) error {
				return handover.Prepare(ctx, c, r, g.Stdout)
			}),
		step("finish", "Once every webhook-plane replica is a ready endpoint of the webhook Service, delete the old Deployment (post-upgrade)",
			func(ctx context.Context, c client.Client, r handover.Release) error {
				return handover.Finish(ctx, c, r, timeout, settle, g.Stdout)
			}))
	f := cmd.PersistentFlags()
	f.StringVar(&r.Legacy, "legacy-deployment", "widget-operator", "the single-Deployment layout's Deployment (the release's full name)")
	f.StringVar(&r.Webhook, "webhook-deployment", "widget-operator-webhook", "the webhook plane's Deployment")
	f.StringVar(&r.Service, "webhook-service", "widget-operator-webhook", "the webhook Service")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "finish: how long to wait for the webhook plane")
	f.DurationVar(&settle, "settle", 5*time.Second, "finish: how long to leave kube-proxy to program the new endpoints before the old pods go")
	return cmd
}

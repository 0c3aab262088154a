package cli

import (
	"time"

	"github.com/spf13/cobra"

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
	release := func() handover.Release {
		r.Namespace = g.Namespace()
		return r
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "prepare",
		Short: "Keep the old Deployment through helm upgrade and let the new webhook Service select its pods (pre-upgrade)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := widgetClient(g)
			if err != nil {
				return err
			}
			return handover.Prepare(cmd.Context(), c, release(), g.Stdout)
		},
	}, &cobra.Command{
		Use:   "finish",
		Short: "Once every webhook-plane replica is a ready endpoint of the webhook Service, delete the old Deployment (post-upgrade)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := widgetClient(g)
			if err != nil {
				return err
			}
			return handover.Finish(cmd.Context(), c, release(), timeout, settle, g.Stdout)
		},
	})
	f := cmd.PersistentFlags()
	f.StringVar(&r.Legacy, "legacy-deployment", "widget-operator", "the single-Deployment layout's Deployment (the release's full name)")
	f.StringVar(&r.Webhook, "webhook-deployment", "widget-operator-webhook", "the webhook plane's Deployment")
	f.StringVar(&r.Service, "webhook-service", "widget-operator-webhook", "the webhook Service")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "finish: how long to wait for the webhook plane")
	f.DurationVar(&settle, "settle", 5*time.Second, "finish: how long to leave kube-proxy to program the new endpoints before the old pods go")
	return cmd
}

package cli

import (
	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/internal/upgrade"
)

// newUpgradePreflightCommand builds `widgetctl upgrade preflight`: the plan and the checks of
// each of its steps, changing nothing.
func newUpgradePreflightCommand(g *GlobalOptions) *cobra.Command {
	return newStageCommand(g, "preflight --to STAGE",
		"Run the checks of every step to STAGE; exit 0 safe, 1 refused, 2 error",
		`preflight is what the chart's pre-install, pre-upgrade and pre-rollback hooks run: a
refusal fails the Helm operation with its message, which names the next safe step and its
runbook.`,
		func(cmd *cobra.Command, e *engine, o *upgrade.Observation, r *planReport) error {
			var err error
			r.Checks, err = upgrade.Preflight(cmd.Context(), e.clients, e.cfg, o, r.Steps)
			return err
		})
}

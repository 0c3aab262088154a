package cli

import (
	"github.com/spf13/cobra"
)

// newUpgradePlanCommand builds `widgetctl upgrade plan`: the steps to a target stage, changing
// nothing and running no check.
func newUpgradePlanCommand(g *GlobalOptions) *cobra.Command {
	return newStageCommand(g, "plan --to STAGE",
		"Show the steps from the current stage to STAGE, with the CRD change and the checks of each", "", nil)
}

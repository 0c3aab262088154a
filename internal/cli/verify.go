package cli

import (
	"errors"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/internal/upgrade"
)

// NewVerifyCommand builds `widgetctl verify`.
func NewVerifyCommand(g *GlobalOptions) *cobra.Command {
	f := &upgradeFlags{}
	cmd := &cobra.Command{
		Use:   "verify --crd NAME",
		Short: "Read every object through every served version and check they agree (round trips for Widgets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := newEngine(g, f)
			if err != nil {
				return err
			}
			r, err := upgrade.Verify(cmd.Context(), e.clients.Client, e.cfg)
			if err != nil {
				return err
			}
			if g.Output == OutputJSON {
				if err := writeJSON(g.Stdout, r); err != nil {
					return err
				}
			} else {
				versions := make([]string, 0, len(r.Objects))
				for v := range r.Objects {
					versions = append(versions, v)
				}
				sort.Strings(versions)
				for _, v := range versions {
					fmt.Fprintf(g.Stdout, "%-10s %d objects\n", v, r.Objects[v])
				}
				if r.Changed > 0 {
					fmt.Fprintf(g.Stdout, "%d objects changed between the reads and were not compared; rerun to cover them\n", r.Changed)
				}
				for _, m := range r.Mismatches {
					fmt.Fprintln(g.Stdout, "MISMATCH", m)
				}
				if r.OK() {
					fmt.Fprintf(g.Stdout, "ok: every object reads the same through %v\n", r.Versions)
				}
			}
			if !r.OK() {
				return errors.New(fmt.Sprint(len(r.Mismatches), " object(s) read differently through the served versions; see runbooks/procedures/conversion-webhook-outage.md"))
			}
			return nil
		},
	}
	f.bind(cmd, false)
	return cmd
}

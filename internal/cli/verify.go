package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/internal/backup"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// NewVerifyCommand builds `widgetctl verify`.
func NewVerifyCommand(g *GlobalOptions) *cobra.Command {
	f := &upgradeFlags{}
	var against string
	var roundTrip bool
	cmd := &cobra.Command{
		Use:   "verify [--against DIR] [--round-trip]",
		Short: "Check that every object reads the same through every served version, matches a backup, or survives a write back",
		Long: `Without flags, verify reads every object through every served version and checks that the
reads agree, field by field (for Widgets: the conversion both ways).

--against DIR compares the live objects with a backup taken by widgetctl backup, through every
version both serve: spec, name, labels, annotations, finalizers and owner references, field by
field (a missing list is not an empty one); objects gone since are failures, new ones are
listed.

--round-trip reads every object through each served version and writes it back unchanged as a
server-side dry run (nothing is stored): the answer must equal what was read, and the spec the
apiserver would store must not change (its generation stays). Through a version that is not
the storage version this runs the live conversion webhook both ways.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := newEngine(cmd.Context(), g, f)
			if err != nil {
				return err
			}
			switch {
			case against != "":
				return verifyAgainst(cmd, g, e, against)
			case roundTrip:
				return verifyRoundTrip(cmd, g, e)
			}
			return verifyVersions(cmd, g, e)
		},
	}
	f.bind(cmd, false)
	cmd.Flags().StringVar(&against, "against", "", "compare the live objects with the backup in this directory (widgetctl backup)")
	cmd.Flags().BoolVar(&roundTrip, "round-trip", false, "write every object back through each served version as a server-side dry run and report what would change")
	cmd.MarkFlagsMutuallyExclusive("against", "round-trip")
	return cmd
}

func verifyVersions(cmd *cobra.Command, g *GlobalOptions, e *engine) error {
	r, err := upgrade.Verify(cmd.Context(), e.clients.Client, e.cfg)
	if err != nil {
		return err
	}
	if err := printReport(g, r, func() {
		for _, v := range slices.Sorted(maps.Keys(r.Objects)) {
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
	}); err != nil {
		return err
	}
	if !r.OK() {
		return errors.New(fmt.Sprint(len(r.Mismatches), " object(s) read differently through the served versions; see runbooks/procedures/conversion-webhook-outage.md"))
	}
	return nil
}

func verifyAgainst(cmd *cobra.Command, g *GlobalOptions, e *engine, dir string) error {
	b, err := backup.Load(dir)
	if err != nil {
		return refused(err)
	}
	if b.Manifest.CRD != e.cfg.CRD {
		return refused(fmt.Errorf("the backup in %s is of CRD %s, not %s: pass --crd %s", dir, b.Manifest.CRD, e.cfg.CRD, b.Manifest.CRD))
	}
	r, err := backup.Compare(cmd.Context(), e.clients.Client, b)
	if err != nil {
		return refused(err)
	}
	if err := printReport(g, r, func() {
		for _, v := range r.Versions {
			fmt.Fprintf(g.Stdout, "%-10s %d objects compared with the backup of %s\n", v, r.Compared[v], b.Time.Format(time.RFC3339))
		}
		for _, m := range r.Missing {
			fmt.Fprintln(g.Stdout, "MISSING", m)
		}
		for _, c := range r.Changed {
			fmt.Fprintln(g.Stdout, "CHANGED", c)
		}
		for _, c := range r.Recreated {
			fmt.Fprintln(g.Stdout, "RECREATED", c)
		}
		if len(r.Added) > 0 {
			fmt.Fprintf(g.Stdout, "%d object(s) created since the backup (not compared)\n", len(r.Added))
		}
		if r.OK() {
			fmt.Fprintf(g.Stdout, "ok: every object of the backup is there, unchanged, through %v\n", r.Versions)
		}
	}); err != nil {
		return err
	}
	if !r.OK() {
		return fmt.Errorf("%d object(s) missing and %d field(s) changed since the backup in %s", len(r.Missing), len(r.Changed), dir)
	}
	return nil
}

func verifyRoundTrip(cmd *cobra.Command, g *GlobalOptions, e *engine) error {
	r, err := upgrade.RoundTrip(cmd.Context(), e.clients.Client, e.cfg.CRD)
	if err != nil {
		return err
	}
	if err := printReport(g, r, func() {
		for _, v := range r.Versions {
			fmt.Fprintf(g.Stdout, "%-10s %d objects written back (dry run, storage version %s)\n", v, r.Objects[v], r.StorageVersion)
		}
		if r.Changed > 0 {
			fmt.Fprintf(g.Stdout, "%d objects changed between the read and the write and were not judged; rerun to cover them\n", r.Changed)
		}
		for _, l := range r.Lossy {
			fmt.Fprintln(g.Stdout, "LOSSY", l)
		}
		if r.OK() {
			fmt.Fprintf(g.Stdout, "ok: every object survives a write back through %v\n", r.Versions)
		}
	}); err != nil {
		return err
	}
	if !r.OK() {
		return fmt.Errorf("%d change(s) on the round trip: the conversion loses data; keep the running build and see runbooks/procedures/conversion-webhook-outage.md", len(r.Lossy))
	}
	return nil
}

// printReport writes r as JSON with --output json, else runs text.
func printReport(g *GlobalOptions, r any, text func()) error {
	if g.Output == OutputJSON {
		return writeJSON(g.Stdout, r)
	}
	text()
	return nil
}

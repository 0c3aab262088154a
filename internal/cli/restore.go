package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/internal/backup"
)

// NewRestoreCommand builds `widgetctl restore`.
func NewRestoreCommand(g *GlobalOptions) *cobra.Command {
	var from, recordsNamespace, drillPrefix string
	var dryRun, drill, keep bool
	cmd := &cobra.Command{
		Use:   "restore --from DIR [--dry-run | --drill]",
		Short: "Bring back what a backup holds, or drill it in scratch namespaces to prove it restorable",
		Long: `restore brings the cluster back to a backup taken by widgetctl backup: every object of the
backup the cluster no longer has is created, every object whose spec, labels, annotations,
finalizers or owner references differ gets the backup's back. It writes through the storage
version when the backup holds it, matches objects by namespace and name (an object deleted and
created again since is restored too), keeps an owner reference only where the owner still
exists with the recorded uid (else the garbage collector would delete the restored object),
and leaves objects created since the backup alone. It reports each object it writes, goes on
past one it cannot write, and afterwards compares the cluster with the backup (verify
--against). --dry-run sends every write as a server-side dry run: nothing is stored.

--drill proves the backup restorable without touching the objects it was taken from: it
creates every object in scratch namespaces of its own (<--drill-prefix>-0, -1, ..., labelled
widgetry.io/restore-drill), reads each back through every version the backup and the cluster
serve, compares it with the backup, deletes the scratch namespaces (--keep leaves them) and
records the result beside the backup's record in --records-namespace. The preflights of
unserve and remove read that record: drill a backup taken after the storage flip before the
old version goes (runbooks/upgrade/unserve.md).`,
		Example: `  widgetctl restore --from backup-20261201-1015 --dry-run
  widgetctl restore --from backup-20261201-1015
  widgetctl restore --from backup-20261201-1015 --drill --records-namespace widget-system`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return refused(errors.New("--from DIR is required: the directory widgetctl backup wrote"))
			}
			b, err := backup.Load(from)
			if err != nil {
				return refused(err)
			}
			c, err := widgetClient(g)
			if err != nil {
				return err
			}
			if drill {
				ns, err := g.recordsNamespace(cmd.Context(), recordsNamespace)
				if err != nil {
					return err
				}
				now := time.Now()
				prefix := drillPrefix
				if prefix == "" {
					prefix = "widget-restore-drill-" + now.UTC().Format("20060102-150405")
				}
				r, err := backup.Drill(cmd.Context(), c, b, backup.DrillOptions{Prefix: prefix, Keep: keep, Dir: from, Now: now})
				if errors.Is(err, backup.ErrNoVersion) || errors.Is(err, backup.ErrDrillNamespaceExists) {
					return refused(err)
				}
				if err != nil {
					return err
				}
				rec := backup.DrillRecord{BackupTime: r.BackupTime, Dir: from, Time: r.Time, Objects: r.Objects, Failed: len(r.Failed), OK: r.OK()}
				if err := backup.SaveDrill(cmd.Context(), c, ns, b.CRD.Name, rec); err != nil {
					return fmt.Errorf("the drill ran (ok=%t), but: %w", r.OK(), err)
				}
				if err := printReport(g, r, func() { printDrill(g.Stdout, r, ns, b.CRD.Name) }); err != nil {
					return err
				}
				if !r.OK() {
					return fmt.Errorf("the drill of the backup in %s failed for %d object(s): this backup would not restore them as they were; see runbooks/procedures/restore.md", from, len(r.Failed))
				}
				return nil
			}
			r, err := backup.Restore(cmd.Context(), c, b, backup.RestoreOptions{DryRun: dryRun})
			if errors.Is(err, backup.ErrNoVersion) {
				return refused(err)
			}
			if err != nil {
				return err
			}
			if err := printReport(g, r, func() { printRestore(g.Stdout, r, from) }); err != nil {
				return err
			}
			if !r.OK() {
				return fmt.Errorf("the restore from %s is incomplete: %d object(s) failed, %d missing and %d field(s) still differ; fix what is named and rerun it (it writes only what still differs)",
					from, len(r.Failed), missing(r), len(r.Unexplained()))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "directory of the backup (widgetctl backup --out; required)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "send every write as a server-side dry run and report what would change; nothing is stored")
	cmd.Flags().BoolVar(&drill, "drill", false, "restore into scratch namespaces, compare, delete them and record the result")
	cmd.Flags().StringVar(&drillPrefix, "drill-prefix", "", "name prefix of the drill's scratch namespaces (default widget-restore-drill-<time>)")
	cmd.Flags().BoolVar(&keep, "keep", false, "with --drill: leave the scratch namespaces for inspection")
	cmd.Flags().StringVar(&recordsNamespace, "records-namespace", "", "with --drill: namespace of the backup record the drill is recorded beside (default: -n, else the release namespace of the Widget CRD, else the context's)")
	cmd.MarkFlagsMutuallyExclusive("dry-run", "drill")
	return cmd
}

func missing(r *backup.RestoreReport) int {
	if r.Verify == nil {
		return 0
	}
	return len(r.Verify.Missing)
}

func printRestore(w io.Writer, r *backup.RestoreReport, from string) {
	verb := "restored"
	if r.DryRun {
		verb = "would restore (dry run)"
	}
	for _, k := range r.Created {
		fmt.Fprintln(w, "CREATED", k)
	}
	for _, k := range r.Restored {
		fmt.Fprintln(w, "RESTORED", k)
	}
	for _, d := range r.DroppedOwnerReferences {
		fmt.Fprintln(w, "DROPPED", d)
	}
	for _, f := range r.Failed {
		fmt.Fprintln(w, "FAILED", f)
	}
	fmt.Fprintf(w, "%s from %s through %s: %d created, %d field(s) put back, %d unchanged, %d failed\n",
		verb, from, r.Version, len(r.Created), len(r.Restored), r.Unchanged, len(r.Failed))
	if r.Verify == nil {
		return
	}
	for _, m := range r.Verify.Missing {
		fmt.Fprintln(w, "STILL MISSING", m)
	}
	for _, c := range r.Unexplained() {
		fmt.Fprintln(w, "STILL CHANGED", c)
	}
	if r.OK() {
		fmt.Fprintf(w, "ok: every object of the backup is there as backed up, through %v\n", r.Verify.Versions)
	}
}

func printDrill(w io.Writer, r *backup.DrillReport, recordsNamespace, crdName string) {
	for _, f := range r.Failed {
		fmt.Fprintln(w, "FAILED", f)
	}
	for src, scratch := range r.Namespaces {
		fmt.Fprintf(w, "namespace %s drilled as %s\n", src, scratch)
	}
	for v, n := range r.Checked {
		fmt.Fprintf(w, "%-10s %d objects read back and compared\n", v, n)
	}
	state := "deleted"
	if r.Kept {
		state = "kept (delete them: kubectl delete namespace -l " + backup.DrillLabel + ")"
	}
	fmt.Fprintf(w, "drill of the backup of %s: %d objects created through %s, scratch namespaces %s; recorded in ConfigMap %s/%s\n",
		r.BackupTime.Format(time.RFC3339), r.Objects, r.Version, state, recordsNamespace, backup.RecordName(crdName))
	if r.OK() {
		fmt.Fprintln(w, "ok: the backup restores every object as it was backed up")
	}
}

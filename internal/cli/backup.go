package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/internal/backup"
	"github.com/widgetry/widget-operator/internal/crd"
)

// NewBackupCommand builds `widgetctl backup`.
func NewBackupCommand(g *GlobalOptions) *cobra.Command {
	var crdName, out, recordsNamespace string
	cmd := &cobra.Command{
		Use:   "backup --out DIR",
		Short: "Write every object of the CRD, as each served version shows it, and the CRD to DIR; record it in the cluster",
		Long: `backup lists every object of the CRD through every served version and writes them, as the
apiserver returned them (resourceVersion, uid and managedFields included; nil and empty kept
apart), with the CRD and a manifest, to DIR, which must be empty or new. It then records the
backup in ConfigMap widget-backup-<crd> of --records-namespace: the preflight of the storage
flip warns when none is recorded. widgetctl verify --against DIR compares the live objects
with it, field by field.

Take one before the storage flip (runbooks/upgrade/flip-storage.md), where both versions are
served: a later verify compares through every version both serve.`,
		Example: `  widgetctl backup --out backup-$(date +%Y%m%d-%H%M) --records-namespace widget-system
  widgetctl verify --against backup-20261201-1015`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return refused(errors.New("--out DIR is required: the directory to write the backup to"))
			}
			c, err := widgetClient(g)
			if err != nil {
				return err
			}
			rc, err := g.RESTConfig()
			if err != nil {
				return err
			}
			m, err := backup.Write(cmd.Context(), c, crdName, out, rc.Host, time.Now())
			if errors.Is(err, backup.ErrNotEmpty) {
				return refused(err)
			}
			if err != nil {
				return err
			}
			host, _ := os.Hostname()
			ns, err := g.recordsNamespace(cmd.Context(), recordsNamespace)
			if err != nil {
				return err
			}
			if err := backup.SaveRecord(cmd.Context(), c, ns, backup.Record{Manifest: *m, Dir: out, Host: host}); err != nil {
				return fmt.Errorf("the backup in %s is complete, but: %w", out, err)
			}
			if g.Output == OutputJSON {
				return writeJSON(g.Stdout, m)
			}
			fmt.Fprintf(g.Stdout, "backed up CRD %s to %s: %v objects through %v (storage %s, storedVersions %v); recorded in ConfigMap %s/%s\n",
				crdName, out, m.Objects, m.Versions, m.StorageVersion, m.StoredVersions, ns, backup.RecordName(crdName))
			return nil
		},
	}
	cmd.Flags().StringVar(&crdName, "crd", crd.WidgetName, "name of the CustomResourceDefinition")
	cmd.Flags().StringVar(&out, "out", "", "directory to write the backup to; must be empty or new (required)")
	cmd.Flags().StringVar(&recordsNamespace, "records-namespace", "", "namespace of the ConfigMap the backup is recorded in (default: -n, else the release namespace of the Widget CRD, else the context's)")
	return cmd
}

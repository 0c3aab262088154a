package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// newUpgradeApplyCommand builds `widgetctl upgrade apply`: the plan, its checks, then the CRD
// change of each step (and the migration at migrate).
func newUpgradeApplyCommand(g *GlobalOptions) *cobra.Command {
	var progressNamespace string
	var wait storageWaitFlags
	cmd := newStageCommand(g, "apply --to STAGE",
		"Check and make the CRD changes to STAGE (installations without Helm)",
		`apply runs the preflight of every step and makes each step's CRD change with an optimistic
lock; at migrate it also migrates the stored objects and trims storedVersions. It refuses a
CRD that Helm manages — a second owner of spec.versions would fight Helm — and prints the
helm upgrade to run instead.`,
		func(cmd *cobra.Command, e *engine, o *upgrade.Observation, r *planReport) error {
			if release, managed := upgrade.HelmManaged(o); managed {
				return &upgrade.Refusal{Message: fmt.Sprintf("CRD %s is managed by Helm (release %q): changing it here would fight Helm over spec.versions", o.CRD, release),
					Next: fmt.Sprintf("helm upgrade %s <chart> --version <the running chart version> --reset-then-reuse-values --set apiUpgrade.stage=%s --timeout 20m", orDefault(release, "widget-operator"), r.To)}
			}
			wait.apiserverFlags = e.apiservers
			var err error
			if r.Checks, err = upgrade.Preflight(cmd.Context(), e.clients, e.cfg, o, r.Steps); err != nil {
				return err
			}
			for _, s := range r.Steps {
				if err := upgrade.Apply(cmd.Context(), e.clients.Client, e.cfg, o, s); err != nil {
					return err
				}
				if s.To == crd.StageMigrate && s.Then != "" {
					if err := runStageMigration(cmd.Context(), g, e.cfg.CRD, progressNamespace, &wait); err != nil {
						return err
					}
				}
			}
			r.Applied = true
			return nil
		})
	cmd.Flags().StringVar(&progressNamespace, "progress-namespace", "", "namespace of the migration's progress ConfigMap, which the manager reads (default: -n, else the release namespace of the Widget CRD, else the context's)")
	wait.bind(cmd.Flags())
	return cmd
}

// runStageMigration migrates the stored objects at the migrate stage with the defaults of
// widgetctl migrate, after every kube-apiserver writes the new storage version.
func runStageMigration(ctx context.Context, g *GlobalOptions, crdName, progressNamespace string, wait *storageWaitFlags) error {
	rc, err := g.RESTConfig()
	if err != nil {
		return err
	}
	if _, err := waitForStorageVersion(ctx, g, rc, crdName, "", wait, newEventLogger(g)); err != nil {
		return err
	}
	m, err := g.NewMigrator(rc)
	if err != nil {
		return err
	}
	if progressNamespace, err = g.recordsNamespace(ctx, progressNamespace); err != nil {
		return err
	}
	res, err := m.Migrate(ctx, migrate.Options{CRD: crdName, ProgressNamespace: progressNamespace})
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stderr, "migrated %d objects of %s to %s (%s backend); storedVersions %v\n", res.Counts.Migrated, crdName, res.StorageVersion, res.Backend, res.StoredVersions)
	return nil
}

//go:build envtest

package migrate_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestInTreeBackend runs the same proof as TestMigrateClientForwardAndReverse with
// kube-controller-manager attached (all controllers, so its storage-version-migrator-controller
// and the garbage collector it needs): auto must pick the in-tree StorageVersionMigration, and
// kube-controller-manager, not the migrator, trims storedVersions.
func TestInTreeBackend(t *testing.T) {
	t.Parallel() // each test has its own control plane; they overlap their waits
	n := widgetenv.EnvInt(t, "WIDGET_MIGRATE_OBJECTS", 1000)
	env := startEnv(t, testenv.Options{ControllerManager: true}, "fleet")
	ctx := context.Background()
	widgetenv.CreateWidgets(t, env.Client, "fleet", n)
	before := readViews(t, env, "fleet")
	m := newMigrator(t, env)

	t.Run("forward to v1, auto picks in-tree", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		log, logs := newLogger(t)
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
			Backend: migrate.BackendAuto, InTreeProbeTimeout: 2 * time.Minute, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("in-tree migration of %d objects took %s", res.Total, res.Duration)
		if res.Backend != migrate.BackendInTree || !strings.Contains(logs.String(), "using the in-tree StorageVersionMigration") {
			t.Errorf("backend %s (fell back: %q), want in-tree", res.Backend, res.FellBack)
		}
		if res.Total != int64(n) {
			t.Errorf("in-tree migration reports %d objects, want %d", res.Total, n)
		}
		assertStoredIn(t, env, "fleet", "v1", n)
		assertSameViews(t, before, readViews(t, env, "fleet"))
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1"}) {
			t.Errorf("storedVersions %v, want [v1]", got)
		}
		if p := progressObject(t, env); p.Phase != migrate.PhaseSucceeded || p.Backend != "in-tree" || p.StorageVersionMigration == "" {
			t.Errorf("progress object %+v", p)
		}
	})

	t.Run("reverse to v1alpha1 with --backend=in-tree", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1alpha1", probeNamespace)
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, To: "v1alpha1", ProgressNamespace: progressNamespace,
			Backend: migrate.BackendInTree, InTreeTimeout: 3 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if res.Backend != migrate.BackendInTree {
			t.Errorf("backend %s", res.Backend)
		}
		assertStoredIn(t, env, "fleet", "v1alpha1", n)
		assertSameViews(t, before, readViews(t, env, "fleet"))
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1alpha1"}) {
			t.Errorf("storedVersions %v, want [v1alpha1]", got)
		}
	})
}

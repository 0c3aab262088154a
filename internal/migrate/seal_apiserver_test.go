//go:build envtest

package migrate_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/gatestate"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestForgedCheckpointMakesAFullPass: a cluster admin (whom the chart's gate-state guard lets
// write the progress object with a reason, but never with the seal) forges a checkpoint that
// matches the CRD in everything and says every object is done (lastKey "~"). The migrate
// hook's next run makes a full pass: every object is rewritten before storedVersions is
// trimmed. The negative control lets unsealed checkpoints resume: the same forgery then skips
// every object and trims storedVersions to [v1] while all of them are still stored as
// v1alpha1 (what made the remove stage lose them).
func TestForgedCheckpointMakesAFullPass(t *testing.T) {
	t.Parallel()
	n := widgetenv.EnvInt(t, "WIDGET_MIGRATE_OBJECTS", 1000) / 4
	env := startEnv(t, testenv.Options{}, "fleet")
	ctx := context.Background()
	widgetenv.CreateWidgets(t, env.Client, "fleet", n)
	m := newMigrator(t, env)

	forge := func() {
		t.Helper()
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: progressNamespace, Name: migrate.ProgressObjectName(crd.WidgetName),
			Annotations: map[string]string{gatestate.Annotation: "resume from here"}}}
		_ = env.Client.Delete(ctx, cm)
		cm.Data = map[string]string{
			migrate.KeyCRD: crd.WidgetName, migrate.KeyStorageVersion: "v1", migrate.KeyCRDGeneration: strconv.FormatInt(live.Generation, 10),
			migrate.KeyCRDUID: string(live.UID), migrate.KeyStoredVersionsAtStart: "v1alpha1,v1", migrate.KeyPhase: migrate.PhaseRunning,
			migrate.KeyLastKey: "~", migrate.KeyBackend: string(migrate.BackendClient),
		}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a forged checkpoint is followed by a full pass", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		forge()
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient, Seal: testSeal})
		if err != nil {
			t.Fatal(err)
		}
		if res.Resumed || res.Counts.Done() != int64(n) {
			t.Errorf("resumed=%v, %d of %d objects done: the forged checkpoint was resumed", res.Resumed, res.Counts.Done(), n)
		}
		assertStoredIn(t, env, "fleet", "v1", n)
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1"}) {
			t.Errorf("storedVersions %v, want [v1]", got)
		}
	})

	t.Run("negative control: resuming unsealed checkpoints skips every object", func(t *testing.T) {
		// Back to every object stored as v1alpha1, then the flip again.
		widgetenv.SetStorageVersion(t, env, "v1alpha1", probeNamespace)
		if _, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, To: "v1alpha1", ProgressNamespace: progressNamespace, Backend: migrate.BackendClient}); err != nil {
			t.Fatal(err)
		}
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		migrate.WithoutSeal(t)
		forge()
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient, Seal: testSeal})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Resumed || res.Counts.Done() != 0 || !slices.Equal(storedVersions(t, env), []string{"v1"}) {
			t.Fatalf("resumed=%v, %d objects done, storedVersions %v: the forgery did not skip the objects, the test above proves nothing",
				res.Resumed, res.Counts.Done(), storedVersions(t, env))
		}
		assertStoredIn(t, env, "fleet", "v1alpha1", n)
		t.Logf("without the seal check: storedVersions trimmed to [v1] with all %d objects still stored as v1alpha1", n)
	})
}

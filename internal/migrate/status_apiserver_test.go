//go:build envtest

package migrate_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// refusal is what the test's admission policy answers every main-resource update of a Widget.
const refusal = "main-resource writes refused by the test policy"

// TestMigrateWritesThroughStatusPastAdmission: with an admission policy that refuses every
// update of a Widget, the migration still re-encodes every object, because it writes
// through the status subresource, which admission registered for the main resource does
// not see. Once the CRD has no status subresource, the migration writes the main resource,
// and the same policy refuses it: that path is kept, and it is what admission sees.
func TestMigrateWritesThroughStatusPastAdmission(t *testing.T) {
	t.Parallel() // each test has its own control plane; they overlap their waits
	const n = 20
	env := startEnv(t, testenv.Options{}, "fleet")
	ctx := context.Background()
	widgetenv.CreateWidgets(t, env.Client, "fleet", n)
	assertStoredIn(t, env, "fleet", "v1alpha1", n)
	refuseWidgetUpdates(t, env)
	m := newMigrator(t, env)

	t.Run("through the status subresource, admission does not see it", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		log, logs := newLogger(t)
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient, Logger: log})
		if err != nil {
			t.Fatalf("migrate: %v (%+v)", err, res)
		}
		if res.Counts.Migrated != n || res.Counts.Unchanged != 0 || res.Counts.Error != 0 {
			t.Errorf("counts %+v, want %d migrated, all rewritten", res.Counts, n)
		}
		if !strings.Contains(logs.String(), "rewriting through the status subresource") {
			t.Errorf("logs do not say which path the rewrite takes:\n%s", logs)
		}
		assertStoredIn(t, env, "fleet", "v1", n)
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1"}) {
			t.Errorf("storedVersions %v, want [v1]", got)
		}
	})

	t.Run("without a status subresource, through the main resource, which admission sees", func(t *testing.T) {
		setStatusSubresource(t, env, false)
		widgetenv.SetStorageVersion(t, env, "v1alpha1", probeNamespace)
		_, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient, StatusSubresource: true})
		if !migrate.IsRefused(err) || !strings.Contains(err.Error(), "has no status subresource") {
			t.Errorf("requiring the status subresource: got %v, want a refusal", err)
		}
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient})
		if err == nil || !strings.Contains(err.Error(), refusal) || res == nil || res.Counts.Error != n {
			t.Errorf("got %v (%+v), want all %d rewrites refused by the policy", err, res, n)
		}
		assertStoredIn(t, env, "fleet", "v1", n)
	})
}

// refuseWidgetUpdates installs a ValidatingAdmissionPolicy that refuses every update of a
// Widget through the main resource (the rule names widgets, not widgets/status), and waits
// until the apiserver enforces it.
func refuseWidgetUpdates(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-widget-updates"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"widgetry.io"}, APIVersions: []string{"*"}, Resources: []string{"widgets"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: refusal}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-widget-updates"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the policy refuses Widget updates", func() error {
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: conversiontest.RealisticWidget("fleet", 0).Name}}
		err := env.Client.Patch(ctx, w, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`)), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), refusal) {
			return fmt.Errorf("dry-run update: %w", err)
		}
		return nil
	})
}

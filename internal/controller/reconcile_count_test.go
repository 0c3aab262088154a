//go:build envtest

package controller_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// startCountedManager starts an apiserver with the CRD at flip-storage, the manager, and a
// namespace ns; it returns them with a token that may read the manager's /metrics, once that
// answers.
func startCountedManager(t *testing.T, ns string) (*testenv.Env, *widgetenv.Manager, string) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageFlipStorage)
	m := op.StartManager(t, widgetenv.ManagerOptions{})
	token := widgetenv.ServiceAccountToken(t, env, "prometheus", true)
	createNamespace(t, env.Client, ns)
	testenv.Eventually(t, timeout, "the metrics endpoint answers", func() error {
		if code, body := m.ScrapeMetrics(token); code != http.StatusOK {
			return fmt.Errorf("HTTP %d: %.200s", code, body)
		}
		return nil
	})
	return env, m, token
}

// TestEachCreatedWidgetReconciledOnce (issue #37): a created Widget is reconciled once. Its
// reconcile writes the finalizer, the catalog entry, the Deployment and the Service (and
// their fields' hand-over to the apply) and the status; none of those writes' watch events
// reconciles it again. (No Deployment controller runs here: on a cluster, a Deployment's
// status changes reconcile its Widget, whose readiness they are.)
func TestEachCreatedWidgetReconciledOnce(t *testing.T) {
	env, m, token := startCountedManager(t, "fleet")
	c := env.Client
	ctx := context.Background()
	before := m.Reconciles(t, token)

	const n = 40
	for i := range n {
		if err := c.Create(ctx, alphaWidget("fleet", fmt.Sprintf("w-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, timeout, "every Widget with its finalizer, catalog entry and status", func() error {
		var errs []error
		for i := range n {
			name := fmt.Sprintf("w-%02d", i)
			got := &v1alpha1.Widget{}
			if err := c.Get(ctx, key("fleet", name), got); err != nil {
				return err
			}
			if !controllerutil.ContainsFinalizer(got, controller.Finalizer) || got.Status.ObservedGeneration != got.Generation ||
				meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady) == nil {
				errs = append(errs, fmt.Errorf("%s not reconciled yet", name))
			} else if err := catalogEntry(c, "fleet", name); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	after := m.SettledReconciles(t, token)
	t.Logf("%d Widgets created: %d reconciles", n, after-before)
	if after-before != n {
		t.Errorf("%d Widgets created were reconciled %d times; want each once", n, after-before)
	}
}

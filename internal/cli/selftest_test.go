//go:build envtest

package cli_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/cli"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestWaitWebhooks: with the admission webhooks registered and nothing answering them,
// `widgetctl wait-webhooks` gives up after its timeout with exit 2 and the runbook; with a
// real widget-manager starting (not yet ready when the command starts), it waits for it and
// exits 0, having only dry-run creates to show for it.
func TestWaitWebhooks(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageInitial)

	code, _, stderr := run(t, env, "wait-webhooks", "--namespace", widgetenv.Namespace, "--timeout", "3s")
	if code != cli.ExitError || !strings.Contains(stderr, "no Widget passed the webhooks within 3s") ||
		!strings.Contains(stderr, "mutate.widgets.widgetry.io") || !strings.Contains(stderr, "runbooks/alerts/WidgetWebhookDown.md") {
		t.Errorf("with no webhook server: exit %d, stderr:\n%s", code, stderr)
	}

	op.StartManager(t, widgetenv.ManagerOptions{NoWait: true})
	code, stdout, stderr := run(t, env, "wait-webhooks", "--namespace", widgetenv.Namespace, "--timeout", "2m")
	if code != cli.ExitDone || !strings.Contains(stdout, "a Widget passed the webhooks (dry-run create through v1alpha1)") {
		t.Fatalf("with a manager starting: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	list := &v1alpha1.WidgetList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(widgetenv.Namespace)); err != nil || len(list.Items) != 0 {
		t.Errorf("wait-webhooks left %d Widgets behind (%v): it must only dry-run", len(list.Items), err)
	}
}

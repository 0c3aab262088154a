//go:build envtest

package webhook_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// warnings collects the Warning headers the apiserver returns.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

// startOperator starts an apiserver with the Widget CRD at add-version, the webhook
// configurations and a real widget-manager, and creates namespace ns.
func startOperator(t *testing.T, ns string) (*testenv.Env, *widgetenv.Operator, *widgetenv.Manager) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	m := op.StartManager(t, widgetenv.ManagerOptions{})
	if out, err := env.Kubectl(t, "create", "namespace", ns); err != nil {
		t.Fatal(err, out)
	}
	return env, op, m
}

// warningClient is a client of env that keeps the warnings the apiserver answers with.
func warningClient(t *testing.T, env *testenv.Env) (client.Client, *warnings) {
	t.Helper()
	seen := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = seen
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c, seen
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.Join(w.seen, "\n")
	w.seen = nil
	return s
}

// TestAdmissionThroughAPIServer: the apiserver calls the manager's mutating and validating
// webhooks for both versions; refusals carry field paths, warnings reach the client.
func TestAdmissionThroughAPIServer(t *testing.T) {
	env, _, _ := startOperator(t, "adm")
	ctx := context.Background()
	c, seen := warningClient(t, env)

	t.Run("defaults through both versions", func(t *testing.T) {
		a := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "adm", Name: "defaults-a"}, Spec: v1alpha1.WidgetSpec{Image: "srv:1"}}
		b := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "adm", Name: "defaults-b"}, Spec: v1.WidgetSpec{Image: "srv:1"}}
		if err := c.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(a.Spec.Replicas, -1) != 1 || ptr.Deref(a.Spec.TimeoutSeconds, -1) != 30 || ptr.Deref(b.Spec.Size, -1) != 1 || ptr.Deref(b.Spec.Timeout, "") != "30s" {
			t.Errorf("defaults: v1alpha1 %+v, v1 %+v", a.Spec, b.Spec)
		}
	})

	t.Run("refusals name the field of the request version", func(t *testing.T) {
		err := c.Create(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "adm", Name: "bad-a"}, Spec: v1alpha1.WidgetSpec{Image: "Not An Image"}})
		if err == nil || !strings.Contains(err.Error(), "spec.image") || !strings.Contains(err.Error(), "must be a container image reference") {
			t.Errorf("v1alpha1: got %v", err)
		}
		err = c.Create(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "adm", Name: "bad-b"}, Spec: v1.WidgetSpec{Image: "upper/Case:1"}})
		if err == nil || !strings.Contains(err.Error(), "spec.image") {
			t.Errorf("v1: got %v", err)
		}
	})

	t.Run("warnings reach the client", func(t *testing.T) {
		seen.take()
		if err := c.Create(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "adm", Name: "zero"}, Spec: v1alpha1.WidgetSpec{Image: "srv", Replicas: ptr.To[int32](0)}}); err != nil {
			t.Fatal(err)
		}
		got := seen.take()
		for _, want := range []string{"spec.replicas is 0", "has no tag", "v1alpha1 Widget is deprecated"} {
			if !strings.Contains(got, want) {
				t.Errorf("warnings %q lack %q", got, want)
			}
		}
		if err := c.Create(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "adm", Name: "slow"}, Spec: v1.WidgetSpec{Image: "srv:latest", Timeout: ptr.To("10m")}}); err != nil {
			t.Fatal(err)
		}
		got = seen.take()
		for _, want := range []string{"spec.timeout is 10m", ":latest"} {
			if !strings.Contains(got, want) {
				t.Errorf("warnings %q lack %q", got, want)
			}
		}
	})

	t.Run("kubectl prints Warning:", func(t *testing.T) {
		manifest := filepath.Join(t.TempDir(), "w.yaml")
		if err := os.WriteFile(manifest, []byte("apiVersion: widgetry.io/v1alpha1\nkind: Widget\nmetadata: {name: kubectl, namespace: adm}\nspec: {image: srv, replicas: 0}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(filepath.Join(env.AssetsDir, "kubectl"), "--kubeconfig", env.Kubeconfig, "create", "-f", manifest).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl create: %v\n%s", err, out)
		}
		for _, want := range []string{"Warning: Validation failed for ValidatingAdmissionPolicy 'widgets.widgetry.io-warnings' with binding 'widgets.widgetry.io-warnings': spec.replicas is 0", "Warning: widgetry.io/v1alpha1 Widget is deprecated"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("kubectl output lacks %q:\n%s", want, out)
			}
		}
	})
}

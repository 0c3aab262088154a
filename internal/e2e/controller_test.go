//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestWidgetReadyOnARealNode: on a real node (containerd, kubelet, kube-proxy) a Widget
// created through v1alpha1 gets pods running the sample HTTP server; the real readiness
// probe gates them, and the Widget reports Ready with its available replicas for the
// generation it observed. The manager runs next to the cluster, inside its network namespace.
func TestWidgetReadyOnARealNode(t *testing.T) {
	c := cluster.Start(t)
	image := c.ImportSampleServer(t)
	dir := t.TempDir()

	// Stage initial: only v1alpha1, so no conversion webhook is involved.
	widgetCRD := crd.Widget()
	if err := crd.ApplyStageFlags(widgetCRD, crd.StageInitial); err != nil {
		t.Fatal(err)
	}
	widgetCRD.TypeMeta = metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
	manifest, err := yaml.Marshal(widgetCRD)
	if err != nil {
		t.Fatal(err)
	}
	crdFile := filepath.Join(dir, "crd.yaml")
	if err := os.WriteFile(crdFile, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Kubectl(t, "apply", "-f", crdFile)
	c.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd.WidgetName, "--timeout=60s")
	c.Kubectl(t, "create", "namespace", widgetenv.Namespace)
	c.Kubectl(t, "create", "namespace", "apps")

	ca := testcerts.NewCA(t, "e2e")
	certDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca.Issue(t, "127.0.0.1").WriteDir(t, certDir)
	log, err := os.Create(filepath.Join(dir, "widget-manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr := c.Command(ctx, widgetenv.ManagerBinary(t), "--namespace="+widgetenv.Namespace, "--webhook-cert-dir="+certDir,
		"--webhook-port="+strconv.Itoa(testenv.FreePort(t)), "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--leader-elect=false")
	mgr.Stdout, mgr.Stderr = log, log
	if err := mgr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mgr.Process.Signal(syscall.SIGTERM)
		_ = mgr.Wait()
		if t.Failed() {
			if data, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("widget-manager log:\n%s", data)
			}
		}
	})

	k, err := client.New(c.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "hello"},
		Spec: v1alpha1.WidgetSpec{Image: image, Replicas: ptr.To[int32](2), Endpoints: []v1alpha1.Endpoint{{Name: "http", Port: 8080}}}}
	if err := k.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testenv.Eventually(t, 3*time.Minute, "the Widget reports Ready", func() error {
		got := &v1alpha1.Widget{}
		if err := k.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue || got.Status.AvailableReplicas != 2 || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("status %+v (generation %d)", got.Status, got.Generation)
		}
		return nil
	})
	t.Logf("Widget Ready with 2 pods %s after creation", time.Since(start).Round(time.Second))

	// The pods really serve: through the Service the Widget owns.
	svc := &corev1.Service{}
	if err := k.Get(ctx, client.ObjectKeyFromObject(w), svc); err != nil {
		t.Fatal(err)
	}
	// kube-proxy programs the Service's rules shortly after the pods are ready.
	testenv.Eventually(t, 30*time.Second, "the Widget's Service answers", func() error {
		resp, err := c.HTTPClient.Get(fmt.Sprintf("http://%s:8080/readyz", svc.Spec.ClusterIP))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	})

	// A spec change: the Deployment follows and status observes the new generation.
	testenv.Eventually(t, 30*time.Second, "scale to 1", func() error {
		got := &v1alpha1.Widget{}
		if err := k.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			return err
		}
		got.Spec.Replicas = ptr.To[int32](1)
		return k.Update(ctx, got)
	})
	testenv.Eventually(t, 2*time.Minute, "Ready with 1 replica for the new generation", func() error {
		got, dep := &v1alpha1.Widget{}, &appsv1.Deployment{}
		if err := k.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			return err
		}
		if err := k.Get(ctx, client.ObjectKeyFromObject(w), dep); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
		if *dep.Spec.Replicas != 1 || got.Status.ObservedGeneration != got.Generation || ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != got.Generation {
			return fmt.Errorf("deployment replicas %d, status %+v, generation %d", *dep.Spec.Replicas, got.Status, got.Generation)
		}
		return nil
	})
}

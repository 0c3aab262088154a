// Package userapps puts on a cluster what users of the Widget API keep outside this project:
// their own Helm charts templating a Widget, and the Argo CD and Flux objects that applied
// one, their CRDs as those projects publish them. The census and migrate-release tests of
// every tier use them.
package userapps

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// Chart writes a user's chart that templates one Widget web through apiVersion
// (widgetry.io/v1alpha1 or widgetry.io/v1), as users' charts do, and returns its directory. Its
// Deployment runs replicas pods of image srv:1 (srv:2 through v1), which no node can pull: 0
// on a real node.
func Chart(tb testing.TB, name, apiVersion string, replicas int) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), name)
	widget := `apiVersion: widgetry.io/v1alpha1
kind: Widget
metadata:
  name: web
spec:
  image: srv:1
  replicas: %[1]d
  timeoutSeconds: 45
  endpoints:
  - name: http
    port: 8080
  - name: admin
    port: 9090
`
	if apiVersion == "widgetry.io/v1" {
		widget = `apiVersion: widgetry.io/v1
kind: Widget
metadata:
  name: web
spec:
  image: srv:2
  size: %[1]d
  timeout: 45s
  endpoints:
    http: {port: 8080}
    admin: {port: 9090}
`
	}
	widget = fmt.Sprintf(widget, replicas)
	for file, text := range map[string]string{
		"Chart.yaml":            "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n",
		"templates/widget.yaml": widget,
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, file)), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// InstallGitOpsCRDs installs Argo CD's Application and Flux's Kustomization CRDs, as those
// projects publish them (through the Go module proxy; argo-cd v3.6 and kustomize-controller
// v1.10 need a newer Go than this module's), and waits until they are served.
func InstallGitOpsCRDs(tb testing.TB, cfg *rest.Config) {
	tb.Helper()
	paths := []string{prereq.ModuleFile(tb, "github.com/argoproj/argo-cd/v3@v3.5.4", "manifests/crds/application-crd.yaml"),
		prereq.ModuleFile(tb, "github.com/fluxcd/kustomize-controller@v1.9.6", "config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml")}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		tb.Fatalf("install the Argo CD and Flux CRDs: %v", err)
	}
}

// GitOpsInventories creates an Argo CD Application argocd/shop-gitops and a Flux Kustomization
// flux-system/shop-gitops (InstallGitOpsCRDs first) and returns a func that sets what their
// status says they applied: the Widget gitops/web through version, as their controllers
// record it.
func GitOpsInventories(tb testing.TB, c client.Client) func(version string) {
	tb.Helper()
	ctx := context.Background()
	objs := []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
			"metadata": map[string]any{"namespace": "argocd", "name": "shop-gitops"},
			"spec": map[string]any{"project": "default",
				"source":      map[string]any{"repoURL": "https://git.example/shop.git", "path": "deploy", "targetRevision": "HEAD"},
				"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "gitops"}}}},
		{Object: map[string]any{"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
			"metadata": map[string]any{"namespace": "flux-system", "name": "shop-gitops"},
			"spec":     map[string]any{"interval": "10m", "path": "./deploy", "prune": true, "sourceRef": map[string]any{"kind": "GitRepository", "name": "shop"}}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetNamespace()}}); err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatal(err)
		}
		if err := c.Create(ctx, o); err != nil {
			tb.Fatal(err)
		}
	}
	return func(version string) {
		tb.Helper()
		statuses := []map[string]any{
			{"resources": []any{map[string]any{"group": "widgetry.io", "version": version, "kind": "Widget", "namespace": "gitops", "name": "web", "status": "Synced"},
				map[string]any{"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "gitops", "name": "cfg", "status": "Synced"}}},
			{"inventory": map[string]any{"entries": []any{map[string]any{"id": "gitops_web_widgetry.io_Widget", "v": version},
				map[string]any{"id": "gitops_cfg__ConfigMap", "v": "v1"}}}},
		}
		for i, o := range objs {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				tb.Fatal(err)
			}
			o.Object["status"] = statuses[i]
			// Argo CD's Application has no status subresource; Flux's Kustomization has one.
			err := c.Status().Update(ctx, o)
			if apierrors.IsNotFound(err) {
				err = c.Update(ctx, o)
			}
			if err != nil {
				tb.Fatalf("%s %s status: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
}

//go:build envtest

package chart

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/testenv"
)

// TestHookRBACGoneAfterFailedHook: the hooks' ServiceAccount and RBAC (cluster-wide read of
// every Widget, update of the CRD's status, ...) do not outlive a hook that fails. On a real
// kube-apiserver with no controller to run Jobs, helm install's pre-install preflight never
// completes and fails at --timeout, with Helm 3 and Helm 4; the RBAC hooks that ran before it
// are deleted (they succeeded, and Helm deletes a failed phase's earlier hooks by their
// hook-succeeded policy), while the failed Job is kept for its log.
func TestHookRBACGoneAfterFailedHook(t *testing.T) {
	hs := helms(t)
	env := testenv.Start(t, testenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "bin", "cert-manager-crds")}})
	chart, _ := filepath.Abs(chartDir)
	ctx := context.Background()
	for _, name := range []string{"helm3", "helm4"} {
		t.Run(name, func(t *testing.T) {
			ns := "hook-rbac-" + name
			if _, err := env.Kubectl(t, "create", "namespace", ns); err != nil {
				t.Fatal(err)
			}
			helmRun := testenv.HelmOn(t, env, ns)
			out, err := helmRun(t, hs[name], "install", "widget-operator", chart, "--timeout", "5s")
			if err == nil || !strings.Contains(out, "failed pre-install") {
				t.Fatalf("helm install with a preflight that never runs: %v, want the pre-install phase to fail\n%s", err, out)
			}
			hooks := "widget-operator-hooks"
			for _, o := range []client.Object{
				&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{},
			} {
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: hooks}, o); !apierrors.IsNotFound(err) {
					t.Errorf("the hooks' %T %s/%s outlived the failed hook: %v", o, ns, hooks, err)
				}
			}
			for _, o := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: hooks + "-apiservers"}, o); !apierrors.IsNotFound(err) {
					t.Errorf("the hooks' %T default/%s-apiservers outlived the failed hook: %v", o, hooks, err)
				}
			}
			for _, o := range []client.Object{&rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}} {
				if err := env.Client.Get(ctx, client.ObjectKey{Name: hooks}, o); !apierrors.IsNotFound(err) {
					t.Errorf("the hooks' %T %s outlived the failed hook: %v", o, hooks, err)
				}
			}
			job := &batchv1.Job{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "widget-operator-preflight"}, job); err != nil {
				t.Errorf("the failed preflight Job was not kept for its log: %v", err)
			}
			if out, err := helmRun(t, hs[name], "uninstall", "widget-operator", "--no-hooks"); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out)
			}
			_ = env.Client.Delete(ctx, job)
			time.Sleep(time.Second)
		})
	}
}

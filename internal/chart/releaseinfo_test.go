//go:build envtest

package chart

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
	"github.com/widgetry/widget-operator/internal/releasestatus"
	"github.com/widgetry/widget-operator/internal/testenv"
)

// TestStatusReadsTheReleaseWithoutSecrets: on-call bound to `view` in the release namespace
// (which has no Secrets) and to get on the CRD and the webhook configurations reads the
// release from the chart's release-info ConfigMap and its hook Jobs: the revision applied, the
// stage, a failed pre-hook of a later revision (whose resources were never applied) as the
// cause, and an older revision's failed hook kept for its log as no cause. The negative
// control: the same account asking for Helm's own records (--helm-storage) is refused the
// Secrets list, which is what status needed before.
func TestStatusReadsTheReleaseWithoutSecrets(t *testing.T) {
	const ns, user = "widget-system", "oncall@example.com"
	env := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	admin := env.Client
	must(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "oncall-view"},
		// view's rules: view is aggregated from this role by kube-controller-manager, which
		// this apiserver runs without.
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregate-to-view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	must(t, admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "oncall-cluster"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, Verbs: []string{"get"}},
	}}))
	must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oncall-cluster"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "oncall-cluster"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	oncall, err := client.New(cfg, client.Options{Scheme: releasestatus.Scheme()})
	must(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	// RBAC's authorizer learns the bindings from its informer, a moment later.
	testenv.Eventually(t, 30*time.Second, "on-call's bindings in force", func() error {
		if err := oncall.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)); err != nil {
			return err
		}
		if err := oncall.Get(ctx, client.ObjectKey{Name: "widgets.widgetry.io"}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get the CRD: %w, want not found (there is none)", err)
		}
		return nil
	})
	status := func(helmStorage bool) *releasestatus.Report {
		t.Helper()
		r, err := releasestatus.Gather(ctx, releasestatus.Options{Client: oncall, Clientset: cs, REST: cfg, Namespace: ns, HelmStorage: helmStorage})
		must(t, err)
		return r
	}

	// The chart as rendered at add-version; helm template renders revision 1.
	rendered := render(t, map[string]any{"apiUpgrade": map[string]any{"stage": "add-version"}})
	var info *corev1.ConfigMap
	for _, cm := range rendered.Kind("ConfigMap") {
		if cm.GetLabels()["app.kubernetes.io/component"] == "release-info" {
			info = &corev1.ConfigMap{}
			must(t, helmtemplate.Into(cm, info))
		}
	}
	if info == nil {
		t.Fatal("the chart renders no release-info ConfigMap")
	}
	preflight := &batchv1.Job{}
	must(t, helmtemplate.Into(rendered.Get("Job", "widget-operator-preflight"), preflight))
	if preflight.Labels[releasestatus.RevisionLabel] != "1" {
		t.Fatalf("the preflight Job's labels %v: want %s=1", preflight.Labels, releasestatus.RevisionLabel)
	}
	must(t, admin.Create(ctx, info))

	r := status(false)
	rel := r.Release
	if rel == nil || rel.Source != releasestatus.SourceReleaseInfo || rel.Name != "widget-operator" || rel.Revision != 1 || rel.Status != "deployed" || rel.Stage != "add-version" || rel.ChartVersion == "" {
		t.Fatalf("release %+v (%s): want widget-operator revision 1 deployed at add-version, read from the release-info ConfigMap", rel, r.ReleaseError)
	}
	if r.Stage.Chart != "add-version" {
		t.Fatalf("stage %+v: want the chart's add-version", r.Stage)
	}

	// Revision 2's preflight failed: its resources were never applied.
	failed := preflight.DeepCopy()
	failed.Labels[releasestatus.RevisionLabel] = "2"
	must(t, admin.Create(ctx, failed))
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	failed.Status = batchv1.JobStatus{StartTime: &now, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
	}}
	must(t, admin.Status().Update(ctx, failed))
	r = status(false)
	if r.Release == nil || r.Release.Revision != 1 || r.Release.Status != "failed" || !strings.Contains(r.Release.Description, "revision 2 was not applied") {
		t.Fatalf("release %+v (%s): want revision 1 applied, failed: revision 2's preflight", r.Release, r.ReleaseError)
	}
	if !hasCause(r, "hook Job widget-operator-preflight of revision 2 failed") {
		t.Fatalf("causes %+v: want the failed preflight of revision 2 named", r.Causes)
	}

	// Revision 3 applied: revision 2's failed Job stays for its log, and is no cause.
	info.Data["revision"] = "3"
	must(t, admin.Update(ctx, info))
	r = status(false)
	if r.Release == nil || r.Release.Revision != 3 || r.Release.Status != "deployed" || len(r.Release.Hooks) != 1 || r.Release.Hooks[0].Phase != "Failed" || r.Release.Hooks[0].Revision != 2 {
		t.Fatalf("release %+v: want revision 3 deployed, revision 2's failed preflight listed", r.Release)
	}
	if hasCause(r, "hook Job") {
		t.Fatalf("causes %+v: an older revision's failed hook is no cause", r.Causes)
	}

	// Rolled back to revision 1 (its manifest, so its release-info) after revision 3's
	// migrate hook failed: that post-hook's revision was applied, then rolled back; no cause.
	// (The migrate hook renders at the migrate stage; a post-hook Job of the same shape.)
	migrate := preflight.DeepCopy()
	migrate.Name, migrate.Annotations["helm.sh/hook"] = "widget-operator-migrate", "post-install,post-upgrade"
	migrate.Labels[releasestatus.RevisionLabel] = "3"
	must(t, admin.Create(ctx, migrate))
	migrate.Status = failed.Status
	must(t, admin.Status().Update(ctx, migrate))
	info.Data["revision"] = "1"
	must(t, admin.Update(ctx, info))
	r = status(false)
	if r.Release == nil || r.Release.Revision != 1 || r.Release.Status != "failed" || !hasCause(r, "widget-operator-preflight of revision 2") || hasCause(r, "widget-operator-migrate") {
		t.Fatalf("release %+v causes %+v: want revision 1 with revision 2's failed preflight (a pre-hook: 2 never applied) a cause, revision 3's failed migrate superseded", r.Release, r.Causes)
	}

	// The negative control: Helm's records are Secrets, which `view` does not list.
	r = status(true)
	if r.Release != nil || !strings.Contains(r.ReleaseError, "secrets is forbidden") {
		t.Fatalf("with --helm-storage as on-call: release %+v, error %q; want the Secrets list forbidden", r.Release, r.ReleaseError)
	}
	t.Logf("status read revision, stage and hooks as view; Helm's records refused it: %s", r.ReleaseError)
}

func hasCause(r *releasestatus.Report, sub string) bool {
	for _, c := range r.Causes {
		if strings.Contains(c.Summary, sub) {
			return true
		}
	}
	return false
}

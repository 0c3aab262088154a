//go:build envtest

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/apitraffic"
	"github.com/widgetry/widget-operator/internal/backup"
	"github.com/widgetry/widget-operator/internal/cli"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestUpgradeCommands walks the Widget CRD from initial to unserve with `widgetctl upgrade
// apply` (an installation without Helm), checking status, plan, preflight, verify, selftest
// and cleanup-finalizers on the way, and the exit codes of refusals. Before unserve it runs
// every check the runbooks prescribe, which read through v1alpha1: the gate subtracts exactly
// those requests (the audit log counts them) and still refuses one GET of another client.
func TestUpgradeCommands(t *testing.T) {
	opts := testenv.Options{}
	auditLog := testenv.AuditLog(t, &opts, "widgetry.io")
	env, hook := widgetenv.StartAtStage(t, crd.StageInitial, opts)
	ctx := context.Background()
	for _, ns := range []string{"widget-system", "fleet"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: fmt.Sprintf("w-%02d", i), Finalizers: []string{"widgetry.io/catalog-cleanup"}},
			Spec: v1alpha1.WidgetSpec{Image: "srv:1", Replicas: ptr.To(int32(i % 3)), TimeoutSeconds: ptr.To(int32(i + 1))}}
		if err := env.Client.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(code int, args ...string) (string, string) {
		t.Helper()
		got, stdout, stderr := run(t, env, args...)
		if got != code {
			t.Fatalf("widgetctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, code, stdout, stderr)
		}
		return stdout, stderr
	}
	stage := func() map[string]any {
		t.Helper()
		out, _ := expect(cli.ExitDone, "upgrade", "status", "-o", "json")
		var status map[string]any
		if err := json.Unmarshal([]byte(out), &status); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		return status
	}

	out, _ := expect(cli.ExitDone, "upgrade", "status")
	for _, want := range []string{"Stage", "initial", "storedVersions  [v1alpha1]", "Objects         50", "Next            add-version"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	_, errOut := expect(cli.ExitRefused, "upgrade", "plan", "--to", "flip-storage")
	if !strings.Contains(errOut, "next safe step: add-version (runbooks/upgrade/add-version.md)") {
		t.Errorf("skipping a stage: %s", errOut)
	}
	expect(cli.ExitRefused, "upgrade", "preflight", "--to", "final")
	expect(cli.ExitRefused, "upgrade", "plan")

	hook.Down.Store(true)
	_, errOut = expect(cli.ExitRefused, "upgrade", "preflight", "--to", "add-version")
	if !strings.Contains(errOut, "conversion-webhook-probe") {
		t.Errorf("preflight with the webhook down: %s", errOut)
	}
	hook.Down.Store(false)
	out, _ = expect(cli.ExitDone, "upgrade", "preflight", "--to", "add-version")
	if !strings.Contains(out, "conversion-webhook-probe") || !strings.Contains(out, "ok") {
		t.Errorf("preflight output: %s", out)
	}

	for _, target := range []crd.Stage{crd.StageAddVersion, crd.StageFlipStorage} {
		expect(cli.ExitDone, "upgrade", "apply", "--to", string(target))
		testenv.Eventually(t, 30*time.Second, "stage "+string(target), func() error {
			if got := stage()["stage"]; got != string(target) {
				return fmt.Errorf("stage %v", got)
			}
			return nil
		})
	}
	// Uninstalling now would leave v1alpha1 reads without their conversion webhook: refused
	// before any change (no pause marker, every finalizer kept).
	_, errOut = expect(cli.ExitRefused, "cleanup-finalizers", "--operator-namespace", "widget-system", "--operator-deployment", "widget-operator")
	if !strings.Contains(errOut, "uninstall refused before any change") || !strings.Contains(errOut, "allowUnsafeUninstall=true") {
		t.Errorf("cleanup-finalizers at flip-storage: %s", errOut)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "widget-system", Name: controller.PausedConfigMap}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused uninstall left a pause marker: %v", err)
	}
	keptFinalizers(t, env, 50)
	// Writes through v1 after the flip, so v1 is stored too.
	testenv.Eventually(t, 30*time.Second, "write through v1", func() error {
		w := &v1.Widget{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: "w-00"}, w); err != nil {
			return err
		}
		w.Spec.Paused, w.Spec.Timeout = ptr.To(true), ptr.To("1.5s")
		return env.Client.Update(ctx, w)
	})
	widgetenv.WaitForStorageVersion(t, env, "v1", "fleet")
	// envtest's apiserver advertises an address it does not listen on: name it.
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	out, _ = expect(cli.ExitDone, "upgrade", "apply", "--to", "migrate", "--progress-namespace", "widget-system", "--apiserver-instances="+u.Host)
	if !strings.Contains(out, "every kube-apiserver writes CRD widgets.widgetry.io as v1") {
		t.Errorf("apply --to migrate did not wait for the storage version: %s", out)
	}
	if s := stage(); s["stage"] != "migrate" || fmt.Sprint(s["storedVersions"]) != "[v1]" {
		t.Fatalf("after apply --to migrate: stage %v storedVersions %v", s["stage"], s["storedVersions"])
	}
	out, _ = expect(cli.ExitDone, "verify")
	if !strings.Contains(out, "ok: every object reads the same through") {
		t.Errorf("verify: %s", out)
	}
	out, _ = expect(cli.ExitDone, "selftest", "--namespace", "fleet")
	if !strings.Contains(out, "selftest ok") {
		t.Errorf("selftest: %s", out)
	}
	// No backup was drilled: unserve is refused, naming the commands.
	traffic := []string{"--apiserver-instances=" + u.Host, "--old-version-traffic-window=2s"}
	_, errOut = expect(cli.ExitRefused, append([]string{"upgrade", "apply", "--to", "unserve"}, traffic...)...)
	if !strings.Contains(errOut, "backup-drilled: no backup of widgets.widgetry.io is recorded") || !strings.Contains(errOut, "widgetctl restore --from DIR --drill") ||
		!strings.Contains(errOut, "--allow-undrilled-backup=<why>") {
		t.Errorf("apply --to unserve without a drilled backup: %s", errOut)
	}
	// The fleet was written and read through v1alpha1 since the flip: unserve is refused with
	// the counts, and passes once a window without v1alpha1 requests went by.
	runbookChecks(t, env, expect, traffic)
	_, errOut = expect(cli.ExitRefused, append([]string{"upgrade", "apply", "--to", "unserve"}, traffic...)...)
	if !strings.Contains(errOut, "no-old-version-traffic") || !strings.Contains(errOut, "v1alpha1 is still in use") || !strings.Contains(errOut, "--allow-old-version-traffic") {
		t.Errorf("apply --to unserve after v1alpha1 traffic: %s", errOut)
	}
	// The runbooks' checks after a quiet window, and one GET through v1alpha1 by another
	// client: refused for that GET alone.
	time.Sleep(2500 * time.Millisecond)
	runbookChecks(t, env, expect, traffic)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: "w-01"}, &v1alpha1.Widget{}); err != nil {
		t.Fatal(err)
	}
	_, errOut = expect(cli.ExitRefused, append([]string{"upgrade", "apply", "--to", "unserve"}, traffic...)...)
	if !strings.Contains(errOut, "v1alpha1 is still in use") || !regexp.MustCompile(`requests since [^;]*ago\): GET 1, counted by 1 kube-apiserver instance\(s\); our own requests not counted: LIST [1-9][^;]* by widgetctl backup, widgetctl restore, widgetctl status, widgetctl verify`).MatchString(errOut) {
		t.Errorf("apply --to unserve after our checks and one GET of another client:\n%s", errOut)
	}
	// Another quiet window, the checks again: unserve passes without an override.
	time.Sleep(2500 * time.Millisecond)
	quiet := time.Now()
	runbookChecks(t, env, expect, traffic)
	out, _ = expect(cli.ExitDone, append([]string{"upgrade", "status"}, traffic...)...)
	if !strings.Contains(out, "Old version traffic") || !strings.Contains(out, ": none, counted by 1") || !strings.Contains(out, "our own requests not counted") {
		t.Errorf("status after a window without other v1alpha1 requests:\n%s", out)
	}
	out, _ = expect(cli.ExitDone, append([]string{"upgrade", "apply", "--to", "unserve"}, traffic...)...)
	// 50 objects: the copies in the earlier drills' scratch namespaces (left Terminating
	// without kube-controller-manager) are not backed up.
	if !regexp.MustCompile(`check backup-drilled +ok: backup .* drilled .* ago: 50 objects restored and read back`).MatchString(out) {
		t.Errorf("apply --to unserve after a drilled backup:\n%s", out)
	}
	ownMatchesAuditLog(t, env, auditLog, quiet)
	if s := stage(); s["stage"] != "unserve" {
		t.Fatalf("stage %v after apply --to unserve", s["stage"])
	}
	// The fleet was written through v1alpha1: remove waits until those managedFields entries
	// are dropped.
	_, errOut = expect(cli.ExitRefused, append([]string{"upgrade", "apply", "--to", "remove"}, traffic...)...)
	if !strings.Contains(errOut, "no-managed-fields-of-old") || !strings.Contains(errOut, "--drop-managed-fields-of v1alpha1") {
		t.Errorf("apply --to remove with v1alpha1 managedFields left: %s", errOut)
	}
	out, _ = expect(cli.ExitDone, "migrate", "--crd", crd.WidgetName, "--progress-namespace", "widget-system", "--apiserver-instances="+u.Host,
		"--drop-managed-fields-of", "v1alpha1")
	if !strings.Contains(out, "dropped the managedFields entries of v1alpha1 from") {
		t.Errorf("migrate --drop-managed-fields-of: %s", out)
	}
	expect(cli.ExitDone, append([]string{"upgrade", "apply", "--to", "remove"}, traffic...)...)
	if s := stage(); s["stage"] != "remove" {
		t.Fatalf("stage %v after apply --to remove", s["stage"])
	}
	out, _ = expect(cli.ExitDone, "selftest", "--namespace", "fleet")
	if !strings.Contains(out, "through v1") {
		t.Errorf("selftest at remove: %s", out)
	}
	expect(cli.ExitDone, "upgrade", "apply", "--to", "unserve")
	if s := stage(); s["stage"] != "unserve" {
		t.Fatalf("stage %v after the rollback from remove", s["stage"])
	}

	// A Helm-managed CRD is Helm's to change.
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
		t.Fatal(err)
	}
	live.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm"}
	live.Annotations = map[string]string{"meta.helm.sh/release-name": "widget-operator"}
	if err := env.Client.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	_, errOut = expect(cli.ExitRefused, "upgrade", "apply", "--to", "migrate")
	if !strings.Contains(errOut, "helm upgrade widget-operator <chart> --version <the running chart version> --reset-then-reuse-values --set apiUpgrade.stage=migrate --timeout 20m") {
		t.Errorf("apply on a Helm-managed CRD: %s", errOut)
	}

	// A cleanup that fails after pausing the controller resumes it.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "widget-system", Name: "widget-operator"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "m"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "m"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "m"}}}}}}
	if err := env.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	// A policy refuses every update of a Widget, so removing the finalizers fails.
	denyWidgetUpdates(t, env)
	out, errOut = expect(cli.ExitError, "cleanup-finalizers", "--operator-namespace", "widget-system", "--operator-deployment", "widget-operator")
	if !strings.Contains(out, "paused the controller") || !strings.Contains(out, "resumed the controller after the failure") {
		t.Errorf("a failed cleanup: %s%s", out, errOut)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "widget-system", Name: controller.PausedConfigMap}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the failed uninstall left the controller paused: %v", err)
	}
	keptFinalizers(t, env, 50)
	allowWidgetUpdates(t, env)

	out, _ = expect(cli.ExitDone, "cleanup-finalizers")
	if !strings.Contains(out, "removed widgetry.io/catalog-cleanup from 50 object(s)") {
		t.Errorf("cleanup-finalizers: %s", out)
	}
	list := &v1.WidgetList{}
	if err := env.Client.List(ctx, list, client.InNamespace("fleet")); err != nil {
		t.Fatal(err)
	}
	for _, w := range list.Items {
		if len(w.Finalizers) != 0 {
			t.Fatalf("%s still has finalizers %v", w.Name, w.Finalizers)
		}
	}
}

// keptFinalizers checks that n Widgets in namespace fleet still have the catalog finalizer.
// runbookChecks runs what the runbooks prescribe after flip-storage and migrate (status,
// verify, the round trip, a backup and its drill), each reading through every served version.
func runbookChecks(t *testing.T, env *testenv.Env, expect func(int, ...string) (string, string), traffic []string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "backup")
	// Without kube-controller-manager, deleted namespaces stay Terminating: a prefix per drill.
	prefix := fmt.Sprintf("drill-%d", time.Now().UnixNano())
	// status reads and dry-run creates through each version; it refuses here for what this
	// cluster lacks (cert-manager, the manager's pods, a Helm release).
	if out, _ := expect(cli.ExitRefused, "status"); !strings.Contains(out, "dry-run create through v1alpha1") {
		t.Errorf("status checked no conversion:\n%s", out)
	}
	expect(cli.ExitDone, append([]string{"upgrade", "status"}, traffic...)...)
	expect(cli.ExitDone, "verify")
	expect(cli.ExitDone, "verify", "--round-trip")
	expect(cli.ExitDone, "backup", "--out", dir)
	expect(cli.ExitDone, "verify", "--against", dir)
	expect(cli.ExitDone, "restore", "--from", dir, "--drill", "--drill-prefix", prefix)
	testenv.Eventually(t, time.Minute, "the drill's namespaces gone", func() error {
		list := &corev1.NamespaceList{}
		if err := env.Client.List(context.Background(), list, client.MatchingLabels{backup.DrillLabel: prefix}); err != nil {
			return err
		}
		for _, ns := range list.Items {
			if ns.DeletionTimestamp == nil {
				return fmt.Errorf("%s not deleted", ns.Name)
			}
		}
		return nil
	})
}

// ownMatchesAuditLog: what widgetctl recorded sending through v1alpha1 since since is what the
// apiserver's audit log says it received from widgetctl, verb by verb.
func ownMatchesAuditLog(t *testing.T, env *testenv.Env, auditLog string, since time.Time) {
	t.Helper()
	old := apitraffic.Resource{Group: "widgetry.io", Version: "v1alpha1", Resource: "widgets"}
	clients, err := apitraffic.AuditClients(auditLog, old, since)
	if err != nil {
		t.Fatal(err)
	}
	audited := map[string]int{}
	for k, verbs := range clients {
		if strings.HasSuffix(k, "(widgetctl)") {
			for verb, n := range verbs {
				audited[verb] += n
			}
		}
	}
	// Nothing names the release namespace here: the records are in the context's.
	own, err := apitraffic.Ledger{Client: env.Client, Namespace: "default", Name: apitraffic.LedgerName(crd.WidgetName)}.LoadOwn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The audit log names Kubernetes verbs, the metrics HTTP ones.
	auditVerb := map[string]string{"GET": "get", "LIST": "list", "WATCH": "watch", "POST": "create", "PUT": "update", "PATCH": "patch", "APPLY": "patch", "DELETE": "delete", "DELETECOLLECTION": "deletecollection"}
	recorded := map[string]int{}
	for _, r := range own {
		if r.Version == old.Version && r.From.After(since) {
			for verb, n := range r.Requests {
				recorded[auditVerb[verb]] += int(n)
			}
		}
	}
	if len(recorded) == 0 || !maps.Equal(recorded, audited) {
		t.Errorf("widgetctl recorded sending %v through v1alpha1 since %s; the audit log received %v", recorded, since.Format(time.RFC3339Nano), audited)
	}
}

func keptFinalizers(t *testing.T, env *testenv.Env, n int) {
	t.Helper()
	list := &v1.WidgetList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace("fleet")); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, w := range list.Items {
		if slices.Contains(w.Finalizers, controller.Finalizer) {
			kept++
		}
	}
	if kept != n {
		t.Errorf("%d Widgets kept the finalizer, want %d", kept, n)
	}
}

const denyPolicy = "test-deny-widget-updates"

// denyWidgetUpdates installs a ValidatingAdmissionPolicy refusing every update of a Widget and
// waits until the apiserver enforces it.
func denyWidgetUpdates(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: denyPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"widgetry.io"}, APIVersions: []string{"*"}, Resources: []string{"widgets"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "test: no Widget updates"}}}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: denyPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: denyPolicy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "Widget updates refused", func() error {
		w := &v1.Widget{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: "w-01"}, w); err != nil {
			return err
		}
		if err := env.Client.Update(ctx, w, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "no Widget updates") {
			return fmt.Errorf("update not refused yet: %w", err)
		}
		return nil
	})
}

// allowWidgetUpdates removes denyWidgetUpdates' policy and waits until updates pass again.
func allowWidgetUpdates(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: denyPolicy}},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: denyPolicy}},
	} {
		if err := env.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "Widget updates admitted", func() error {
		w := &v1.Widget{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: "w-01"}, w); err != nil {
			return err
		}
		return env.Client.Update(ctx, w, client.DryRunAll)
	})
}

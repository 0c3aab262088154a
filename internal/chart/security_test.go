//go:build envtest

package chart

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/widgetry/widget-operator/internal/crd"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// allParts renders everything the chart can render: stage migrate (migration hook) with
// monitoring, dashboards and the NetworkPolicy on.
func allParts(t *testing.T) helmtemplate.Objects {
	t.Helper()
	return render(t, set("apiUpgrade.stage", string(crd.StageMigrate), "monitoring.serviceMonitor.enabled", true,
		"monitoring.prometheusRule.enabled", true, "monitoring.dashboards.enabled", true, "networkPolicy.enabled", true), helmtemplate.MonitoringAPIs...)
}

// podSpecs are the specs of every pod the chart creates: the two planes' ("Deployment
// <name>"), each hook Job's ("Job <name>") and the test pod's ("test Pod").
func podSpecs(t *testing.T, objs helmtemplate.Objects) map[string]corev1.PodSpec {
	t.Helper()
	specs := map[string]corev1.PodSpec{}
	for _, d := range []*appsv1.Deployment{deployment(t, objs), controllerDeployment(t, objs)} {
		specs["Deployment "+d.Name] = d.Spec.Template.Spec
	}
	for _, u := range objs.Kind("Job") {
		specs["Job "+u.GetName()] = job(t, objs, u.GetName()).Spec.Template.Spec
	}
	pod := &corev1.Pod{}
	if err := helmtemplate.Into(objs.Get("Pod", "widget-operator-selftest"), pod); err != nil {
		t.Fatal(err)
	}
	specs["test Pod"] = pod.Spec
	return specs
}

// TestPodSecurityRestricted: every pod the chart creates (manager, hook Jobs, test pod)
// passes Pod Security "restricted" and has a read-only root filesystem.
func TestPodSecurityRestricted(t *testing.T) {
	specs := podSpecs(t, allParts(t))
	if len(specs) != 7 {
		t.Fatalf("want the 2 Deployments, 4 Jobs (preflight, wait-webhooks, migrate, cleanup-finalizers) and the test pod, got %d", len(specs))
	}
	for what, spec := range specs {
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext %+v", what, psc)
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: host namespaces", what)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: hostPath volume", what)
			}
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
				!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || (sc.Privileged != nil && *sc.Privileged) {
				t.Errorf("%s container %s: securityContext %+v", what, c.Name, sc)
			}
			if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("%s container %s: no resources", what, c.Name)
			}
		}
	}
}

// TestRBAC: no wildcards anywhere; the manager may write only what it owns; the hooks' RBAC
// is created before the hook Jobs in every phase and deleted once they succeeded.
func TestRBAC(t *testing.T) {
	objs := allParts(t)
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, u := range objs.Kind(kind) {
			r := &rbacv1.ClusterRole{}
			if err := helmtemplate.Into(u, r); err != nil {
				t.Fatal(err)
			}
			for _, rule := range r.Rules {
				for _, l := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames, rule.NonResourceURLs} {
					if slices.Contains(l, "*") {
						t.Errorf("%s %s: wildcard in %+v", kind, u.GetName(), rule)
					}
				}
				if slices.Contains(rule.Resources, "customresourcedefinitions") && !slices.Equal(rule.ResourceNames, []string{crd.WidgetName}) {
					t.Errorf("%s %s: CRD access beyond %s: %+v", kind, u.GetName(), crd.WidgetName, rule)
				}
				// Secrets only by name: the serving certificate's and the CA bundle's (the
				// elected manager keeps the bundle overlapping CA rotations).
				if slices.Contains(rule.Resources, "secrets") && (len(rule.ResourceNames) == 0 ||
					slices.ContainsFunc(rule.ResourceNames, func(n string) bool { return n != "widget-operator-serving-cert" && n != "widget-operator-ca-bundle" })) {
					t.Errorf("%s %s reads Secrets beyond its own two: %+v", kind, u.GetName(), rule)
				}
			}
		}
	}
	// The leader-election Lease and the catalog live in the release namespace only.
	role := objs.Get("Role", "widget-operator-controller")
	if role == nil || role.GetNamespace() != "widget-system" {
		t.Fatal("no controller plane Role in the release namespace")
	}
	// The webhook plane faces the network: no Role, and its ClusterRole writes nothing (only
	// the reviews of its scrapers' tokens are created).
	if objs.Get("Role", "widget-operator-webhook") != nil {
		t.Error("the webhook plane has a Role: it reads nothing in the namespace")
	}
	webhookRole := objs.Get("ClusterRole", "widget-operator-webhook")
	if webhookRole == nil {
		t.Fatal("no ClusterRole for the webhook plane")
	}
	cr := &rbacv1.ClusterRole{}
	if err := helmtemplate.Into(webhookRole, cr); err != nil {
		t.Fatal(err)
	}
	for _, rule := range cr.Rules {
		reviews := slices.Contains(rule.APIGroups, "authentication.k8s.io") || slices.Contains(rule.APIGroups, "authorization.k8s.io")
		for _, verb := range rule.Verbs {
			if !slices.Contains([]string{"get", "list", "watch"}, verb) && !reviews {
				t.Errorf("the webhook plane may %s %v", verb, rule.Resources)
			}
		}
		if !reviews && len(rule.ResourceNames) == 0 {
			t.Errorf("the webhook plane reads %v beyond the objects that judge its certificate, by name", rule.Resources)
		}
	}
	weight := func(u interface{ GetAnnotations() map[string]string }) int {
		w, err := strconv.Atoi(u.GetAnnotations()["helm.sh/hook-weight"])
		if err != nil {
			t.Fatalf("hook weight: %v", err)
		}
		return w
	}
	hookPhases := []string{"pre-install", "pre-upgrade", "pre-rollback", "post-install", "post-upgrade", "pre-delete", "test"}
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"} {
		u := objs.Get(kind, "widget-operator-hooks")
		if u == nil {
			t.Fatalf("no hook %s", kind)
		}
		a := u.GetAnnotations()
		if a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" || a["helm.sh/hook"] != strings.Join(hookPhases, ",") || weight(u) >= 0 {
			t.Errorf("hook %s annotations %v", kind, a)
		}
	}
	// Jobs and the test pod come after the RBAC they use (negative weights); the migration
	// after wait-webhooks, since it needs the webhooks too.
	for _, u := range append(objs.Kind("Job"), objs.Kind("Pod")...) {
		a := u.GetAnnotations()
		want, output := 0, "hook-failed"
		switch u.GetName() {
		case "widget-operator-migrate", "widget-operator-drop-managed-fields":
			want = 1
		case "widget-operator-preflight":
			output = "hook-succeeded,hook-failed" // its checks and warnings, also when it passes
		}
		if weight(u) != want || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" || a["helm.sh/hook-output-log-policy"] != output {
			t.Errorf("%s %s annotations %v", u.GetKind(), u.GetName(), u.GetAnnotations())
		}
	}
}

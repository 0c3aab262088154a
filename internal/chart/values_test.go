//go:build envtest

package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// set builds a values tree from dotted paths and values: set("a.b", 1, "c", "x").
func set(kv ...any) map[string]any {
	out := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		parts := strings.Split(kv[i].(string), ".")
		m := out
		for _, p := range parts[:len(parts)-1] {
			if _, ok := m[p]; !ok {
				m[p] = map[string]any{}
			}
			m = m[p].(map[string]any)
		}
		m[parts[len(parts)-1]] = kv[i+1]
	}
	return out
}

// paths lists the dotted paths set() was given, as leaves of values.
func paths(kv ...any) []string {
	var out []string
	for i := 0; i < len(kv); i += 2 {
		out = append(out, kv[i].(string))
	}
	return out
}

// deployment is the webhook plane's Deployment, controllerDeployment the controller plane's.
func deployment(t *testing.T, objs helmtemplate.Objects) *appsv1.Deployment {
	t.Helper()
	return deploymentNamed(t, objs, "widget-operator-webhook")
}

func controllerDeployment(t *testing.T, objs helmtemplate.Objects) *appsv1.Deployment {
	t.Helper()
	return deploymentNamed(t, objs, "widget-operator-controller")
}

func deploymentNamed(t *testing.T, objs helmtemplate.Objects, name string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	u := objs.Get("Deployment", name)
	if u == nil {
		t.Fatalf("no Deployment %s", name)
	}
	if err := helmtemplate.Into(u, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func job(t *testing.T, objs helmtemplate.Objects, name string) *batchv1.Job {
	t.Helper()
	u := objs.Get("Job", name)
	if u == nil {
		return nil
	}
	j := &batchv1.Job{}
	if err := helmtemplate.Into(u, j); err != nil {
		t.Fatal(err)
	}
	// Every hook records why it writes (the gate-state guard's audit reason) as its first
	// argument; the checks below compare the command after it.
	c := &j.Spec.Template.Spec.Containers[0]
	want := fmt.Sprintf("--reason=helm hook %s of release widget-operator, revision 1", strings.TrimPrefix(name, "widget-operator-"))
	if len(c.Args) == 0 || c.Args[0] != want {
		t.Fatalf("Job %s: args %q, want %q first", name, c.Args, want)
	}
	c.Args = c.Args[1:]
	return j
}

func field(t *testing.T, u *unstructured.Unstructured, path ...string) any {
	t.Helper()
	if u == nil {
		t.Fatalf("no object for %v", path)
	}
	v, ok, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s %s: no %v (%v)", u.GetKind(), u.GetName(), path, err)
	}
	return v
}

func wantArg(t *testing.T, args []string, want string) {
	t.Helper()
	if !slices.Contains(args, want) {
		t.Errorf("args %v lack %q", args, want)
	}
}

func jsonEq(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s: got %s, want %s", what, g, w)
	}
}

// valueCase renders the chart with some values set and checks the output they change.
type valueCase struct {
	name  string
	kv    []any
	apis  []string
	check func(t *testing.T, objs helmtemplate.Objects)
}

var valueCases = []valueCase{{
	name: "hostNetwork rolls one replica at a time",
	kv:   []any{"hostNetwork", true},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		d := deployment(t, objs)
		if !d.Spec.Template.Spec.HostNetwork || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 1 || d.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() != 1 {
			t.Errorf("hostNetwork %t, strategy %+v: want maxUnavailable 1, maxSurge 1", d.Spec.Template.Spec.HostNetwork, d.Spec.Strategy.RollingUpdate)
		}
	},
}, {
	name: "defaults",
	check: func(t *testing.T, objs helmtemplate.Objects) {
		d := deployment(t, objs)
		if *d.Spec.Replicas != 2 || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 || d.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() != 1 {
			t.Errorf("replicas/strategy: %d %+v", *d.Spec.Replicas, d.Spec.Strategy)
		}
		pod := d.Spec.Template.Spec
		if pod.Affinity == nil || len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
			pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
			t.Errorf("anti-affinity: %+v", pod.Affinity)
		}
		if len(pod.TopologySpreadConstraints) != 1 || pod.TopologySpreadConstraints[0].TopologyKey != "topology.kubernetes.io/zone" ||
			pod.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
			t.Errorf("topology spread: %+v", pod.TopologySpreadConstraints)
		}
		c := pod.Containers[0]
		if c.Image != "localhost/widget-operator:dev" || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
		}
		if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.StartupProbe == nil {
			t.Error("probes: liveness /healthz, readiness /readyz and a startup probe")
		}
		// The grace period outlasts the drain delay plus a shutdown phase.
		if *pod.TerminationGracePeriodSeconds <= 10+30 {
			t.Errorf("terminationGracePeriodSeconds %d <= drain delay + graceful shutdown", *pod.TerminationGracePeriodSeconds)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			switch from := e.ValueFrom; {
			case from != nil && from.FieldRef != nil:
				env[e.Name] = from.FieldRef.FieldPath
			case from != nil && from.ResourceFieldRef != nil:
				env[e.Name] = from.ResourceFieldRef.ContainerName + "/" + from.ResourceFieldRef.Resource
			default:
				env[e.Name] = e.Value
			}
		}
		// GOMEMLIMIT is the container's memory limit: the webhooks' budget and body limits
		// follow it.
		if env["POD_NAMESPACE"] != "metadata.namespace" || env["POD_NAME"] != "metadata.name" || env["GOMEMLIMIT"] != "webhook/limits.memory" {
			t.Errorf("env: %v", env)
		}
		// Where the replica runs, for widget_replica_placement_info.
		if env["NODE_NAME"] != "spec.nodeName" || env["NODE_ZONE"] != "metadata.labels['topology.kubernetes.io/zone']" {
			t.Errorf("env: %v", env)
		}
		if pod.Volumes[0].Secret.SecretName != "widget-operator-serving-cert" {
			t.Errorf("certificate volume: %+v", pod.Volumes[0])
		}
		for _, a := range []string{"--components=webhooks", "--webhook-port=9443", "--metrics-bind-address=:8443", "--drain-delay=10s", "--connection-drain-timeout=95s",
			"--webhook-configuration-name=widget-operator", "--zap-log-level=info", "--graceful-shutdown-timeout=30s", "--metrics-cert-dir=/etc/widget-operator/serving-certs"} {
			wantArg(t, c.Args, a)
		}
		// The webhook plane: one container, the webhooks, selected by the webhook Service;
		// the controller plane is a Deployment of its own.
		if len(pod.Containers) != 1 || c.Name != "webhook" || d.Spec.Template.Labels["widgetry.io/serves-webhooks"] != "true" ||
			d.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "webhook" || pod.ServiceAccountName != "widget-operator" {
			t.Fatalf("webhook plane: containers %d (%s), labels %v, selector %v, account %s", len(pod.Containers), c.Name, d.Spec.Template.Labels, d.Spec.Selector.MatchLabels, pod.ServiceAccountName)
		}
		// The controller plane: leader election, no drain, its own metrics endpoint with its
		// own certificate, liveness and readiness, its own account, never the serving key.
		cd := controllerDeployment(t, objs)
		cpod := cd.Spec.Template.Spec
		if *cd.Spec.Replicas != 2 || len(cpod.Containers) != 1 || cpod.ServiceAccountName != "widget-operator-controller" || cpod.HostNetwork ||
			cd.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "controller" || cd.Spec.Template.Labels["widgetry.io/serves-webhooks"] != "" {
			t.Fatalf("controller plane: replicas %d, containers %d, account %s, hostNetwork %t, labels %v", *cd.Spec.Replicas, len(cpod.Containers), cpod.ServiceAccountName, cpod.HostNetwork, cd.Spec.Template.Labels)
		}
		ctl := cpod.Containers[0]
		for _, a := range []string{"--components=controller", "--leader-elect=true", "--max-concurrent-reconciles=4", "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s",
			"--leader-elect-retry-period=2s", "--drain-delay=0s", "--connection-drain-timeout=0s", "--health-probe-bind-address=:8082",
			"--metrics-bind-address=:8443", "--metrics-cert-dir=/etc/widget-operator/metrics-certs"} {
			wantArg(t, ctl.Args, a)
		}
		if ctl.Name != "controller" || ctl.ReadinessProbe == nil || ctl.LivenessProbe.HTTPGet.Port.String() != "health" || len(ctl.Ports) != 2 {
			t.Errorf("controller container probes and ports: readiness %v liveness %+v ports %+v", ctl.ReadinessProbe, ctl.LivenessProbe, ctl.Ports)
		}
		var memLimit *corev1.ResourceFieldSelector
		for _, e := range ctl.Env {
			if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil {
				memLimit = e.ValueFrom.ResourceFieldRef
			}
		}
		if ctl.Resources.Limits.Memory().String() != "256Mi" || memLimit == nil || memLimit.ContainerName != "controller" {
			t.Errorf("controller container resources %+v, GOMEMLIMIT from %+v", ctl.Resources, memLimit)
		}
		for _, v := range cpod.Volumes {
			if v.Secret != nil && v.Secret.SecretName != "widget-operator-controller-metrics" {
				t.Errorf("the controller plane mounts Secret %s", v.Secret.SecretName)
			}
		}
		for _, plane := range []string{"webhook", "controller"} {
			pdb := &policyv1.PodDisruptionBudget{}
			if err := helmtemplate.Into(objs.Get("PodDisruptionBudget", "widget-operator-"+plane), pdb); err != nil {
				t.Fatal(err)
			}
			if pdb.Spec.MaxUnavailable.IntValue() != 1 || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow ||
				pdb.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != plane {
				t.Errorf("%s PDB: %+v", plane, pdb.Spec)
			}
		}
		svc := &corev1.Service{}
		if err := helmtemplate.Into(objs.Get("Service", "widget-operator-webhook"), svc); err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "webhook" || svc.Spec.Selector["widgetry.io/serves-webhooks"] != "true" ||
			svc.Spec.Selector["app.kubernetes.io/component"] != "" {
			t.Errorf("webhook Service: ports %+v, selector %v", svc.Spec.Ports, svc.Spec.Selector)
		}
		cert := objs.Get("Certificate", "widget-operator-serving")
		jsonEq(t, "serving dnsNames", field(t, cert, "spec", "dnsNames"), []string{"widget-operator-webhook", "widget-operator-webhook.widget-system",
			"widget-operator-webhook.widget-system.svc", "widget-operator-webhook.widget-system.svc.cluster.local",
			"widget-operator-metrics.widget-system.svc", "widget-operator-metrics.widget-system.svc.cluster.local"})
		jsonEq(t, "serving key", field(t, cert, "spec", "privateKey"), map[string]any{"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"})
		jsonEq(t, "serving issuer", field(t, cert, "spec", "issuerRef"), map[string]any{"group": "cert-manager.io", "kind": "Issuer", "name": "widget-operator-ca"})
		jsonEq(t, "durations", []any{field(t, cert, "spec", "duration"), field(t, cert, "spec", "renewBefore")}, []string{"2160h", "720h"})
		ca := objs.Get("Certificate", "widget-operator-ca")
		jsonEq(t, "CA", []any{field(t, ca, "spec", "isCA"), field(t, ca, "spec", "issuerRef", "name"), field(t, ca, "spec", "duration")}, []any{true, "widget-operator-selfsigned", "87600h"})
		if objs.Get("Issuer", "widget-operator-selfsigned") == nil || objs.Get("Issuer", "widget-operator-ca") == nil {
			t.Error("the bootstrap and CA Issuers are missing")
		}
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			u := objs.Get(kind, "widget-operator")
			if u.GetAnnotations()["cert-manager.io/inject-ca-from-secret"] != "widget-system/widget-operator-ca-bundle" {
				t.Errorf("%s lacks inject-ca-from-secret", kind)
			}
			var wh admissionregistrationv1.ValidatingWebhook
			b, _ := json.Marshal(field(t, u, "webhooks").([]any)[0])
			if err := json.Unmarshal(b, &wh); err != nil {
				t.Fatal(err)
			}
			// The mutating webhook keeps what v1alpha1 writers cannot see: without it such a
			// write would lose it, so it fails closed. The validating one only adds to the CRD's
			// rules: it fails open.
			policy := map[string]admissionregistrationv1.FailurePolicyType{
				"MutatingWebhookConfiguration": admissionregistrationv1.Fail, "ValidatingWebhookConfiguration": admissionregistrationv1.Ignore}[kind]
			if *wh.FailurePolicy != policy || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone ||
				*wh.TimeoutSeconds != 10 || *wh.MatchPolicy != admissionregistrationv1.Equivalent ||
				!slices.Equal(wh.AdmissionReviewVersions, []string{"v1"}) || !slices.Equal(wh.Rules[0].APIVersions, []string{"v1alpha1", "v1"}) ||
				wh.ClientConfig.Service.Name != "widget-operator-webhook" || wh.ClientConfig.CABundle != nil {
				t.Errorf("%s: %+v", kind, wh)
			}
		}
		pre := job(t, objs, "widget-operator-preflight")
		if pre == nil || !slices.Equal(pre.Spec.Template.Spec.Containers[0].Args, []string{"upgrade", "preflight", "--to", "initial",
			"--webhook-url=https://$(WIDGET_OPERATOR_WEBHOOK_SERVICE_HOST):443/convert", "--records-namespace", "widget-system", "--old-version-traffic-window=24h"}) || pre.Spec.Template.Spec.EnableServiceLinks == nil || !*pre.Spec.Template.Spec.EnableServiceLinks ||
			pre.Annotations["helm.sh/hook"] != "pre-install,pre-upgrade,pre-rollback" || *pre.Spec.BackoffLimit != 1 || *pre.Spec.ActiveDeadlineSeconds != 900 {
			t.Errorf("preflight Job: %+v", pre)
		}
		if job(t, objs, "widget-operator-migrate") != nil {
			t.Error("a migrate Job outside stage migrate")
		}
		ww := job(t, objs, "widget-operator-wait-webhooks")
		if ww == nil || ww.Annotations["helm.sh/hook"] != "post-install,post-upgrade" || ww.Annotations["helm.sh/hook-weight"] != "0" ||
			!slices.Equal(ww.Spec.Template.Spec.Containers[0].Args, []string{"wait-webhooks", "--namespace", "widget-system", "--timeout", "5m"}) {
			t.Errorf("wait-webhooks Job: %+v", ww)
		}
		cl := job(t, objs, "widget-operator-cleanup-finalizers")
		if cl == nil || cl.Annotations["helm.sh/hook"] != "pre-delete" ||
			!slices.Equal(cl.Spec.Template.Spec.Containers[0].Args, []string{"cleanup-finalizers", "--crd", "widgets.widgetry.io", "--finalizer", "widgetry.io/catalog-cleanup",
				"--operator-namespace", "widget-system", "--operator-deployment", "widget-operator-controller", "--allow-unsafe-uninstall=false"}) {
			t.Errorf("cleanup Job: %+v", cl)
		}
		test := objs.Get("Pod", "widget-operator-selftest")
		jsonEq(t, "selftest args", field(t, test, "spec", "containers").([]any)[0].(map[string]any)["args"],
			[]string{"--reason=helm hook selftest of release widget-operator, revision 1", "selftest", "--namespace", "widget-system"})
		for _, kind := range []string{"ServiceMonitor", "PrometheusRule", "NetworkPolicy"} {
			if len(objs.Kind(kind)) != 0 {
				t.Errorf("%s rendered by default", kind)
			}
		}
		// The one ConfigMap by default: what status reads of the release.
		if cms := objs.Kind("ConfigMap"); len(cms) != 1 || cms[0].GetName() != "widget-operator-release-info" {
			t.Errorf("ConfigMaps rendered by default: %d, want only widget-operator-release-info", len(cms))
		}
	},
}, {
	name: "one replica of each plane: no PodDisruptionBudget",
	kv:   []any{"replicaCount", 1, "controller.replicaCount", 1},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if *deployment(t, objs).Spec.Replicas != 1 || *controllerDeployment(t, objs).Spec.Replicas != 1 || len(objs.Kind("PodDisruptionBudget")) != 0 {
			t.Error("want 1 replica of each plane and no PDB")
		}
	},
}, {
	name: "the planes scaled apart: a budget for the plane with more than one",
	kv:   []any{"replicaCount", 3, "controller.replicaCount", 1},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if *deployment(t, objs).Spec.Replicas != 3 || *controllerDeployment(t, objs).Spec.Replicas != 1 || len(objs.Kind("PodDisruptionBudget")) != 1 ||
			objs.Get("PodDisruptionBudget", "widget-operator-webhook") == nil {
			t.Error("want 3 webhook replicas, 1 controller, and the webhook plane's PDB only")
		}
	},
}, {
	name: "the controller's workers: the flag its container runs with",
	kv:   []any{"controller.maxConcurrentReconciles", 16},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		wantArg(t, controllerDeployment(t, objs).Spec.Template.Spec.Containers[0].Args, "--max-concurrent-reconciles=16")
	},
}, {
	name: "PDB off",
	kv:   []any{"podDisruptionBudget.enabled", false, "replicaCount", 3},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if *deployment(t, objs).Spec.Replicas != 3 || len(objs.Kind("PodDisruptionBudget")) != 0 {
			t.Error("want 3 replicas and no PDB")
		}
	},
}, {
	name: "image",
	kv: []any{"image.repository", "registry.example.com/wo", "image.tag", "1.2.3", "image.pullPolicy", "Always",
		"imagePullSecrets", []any{map[string]any{"name": "pull"}}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		for _, spec := range []corev1.PodSpec{deployment(t, objs).Spec.Template.Spec, controllerDeployment(t, objs).Spec.Template.Spec, job(t, objs, "widget-operator-preflight").Spec.Template.Spec} {
			c := spec.Containers[0]
			if c.Image != "registry.example.com/wo:1.2.3" || c.ImagePullPolicy != corev1.PullAlways || spec.ImagePullSecrets[0].Name != "pull" {
				t.Errorf("image %s %s %v", c.Image, c.ImagePullPolicy, spec.ImagePullSecrets)
			}
		}
	},
}, {
	name: "names",
	kv:   []any{"fullnameOverride", "wo", "nameOverride", "widgets"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		u := objs.Get("Deployment", "wo-webhook")
		if u == nil || u.GetLabels()["app.kubernetes.io/name"] != "widgets" || objs.Get("Service", "wo-webhook") == nil || objs.Get("Deployment", "wo-controller") == nil {
			t.Error("want Deployments wo-webhook (named widgets) and wo-controller and Service wo-webhook")
		}
	},
}, {
	name: "cluster domain",
	kv:   []any{"clusterDomain", "example.internal"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		names := field(t, objs.Get("Certificate", "widget-operator-serving"), "spec", "dnsNames").([]any)
		if names[3] != "widget-operator-webhook.widget-system.svc.example.internal" {
			t.Errorf("dnsNames %v", names)
		}
	},
}, {
	name: "existing ClusterIssuer",
	kv: []any{"certManager.issuerRef", map[string]any{"name": "corp-ca", "kind": "ClusterIssuer"},
		"certManager.duration", "720h", "certManager.renewBefore", "240h"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if len(objs.Kind("Issuer")) != 0 || objs.Get("Certificate", "widget-operator-ca") != nil {
			t.Error("the chart's own CA rendered next to issuerRef")
		}
		cert := objs.Get("Certificate", "widget-operator-serving")
		jsonEq(t, "issuerRef", field(t, cert, "spec", "issuerRef"), map[string]any{"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp-ca"})
		jsonEq(t, "durations", []any{field(t, cert, "spec", "duration"), field(t, cert, "spec", "renewBefore")}, []string{"720h", "240h"})
	},
}, {
	name: "CA lifetime",
	kv:   []any{"certManager.caDuration", "43800h", "certManager.caRenewBefore", "4380h"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		ca := objs.Get("Certificate", "widget-operator-ca")
		jsonEq(t, "CA durations", []any{field(t, ca, "spec", "duration"), field(t, ca, "spec", "renewBefore")}, []string{"43800h", "4380h"})
	},
}, {
	name: "webhook port and timeout",
	kv:   []any{"webhook.port", 10443, "webhook.timeoutSeconds", 5},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		c := deployment(t, objs).Spec.Template.Spec.Containers[0]
		wantArg(t, c.Args, "--webhook-port=10443")
		if c.Ports[0].ContainerPort != 10443 {
			t.Errorf("ports %+v", c.Ports)
		}
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			if to := field(t, objs.Get(kind, "widget-operator"), "webhooks").([]any)[0].(map[string]any)["timeoutSeconds"]; to != int64(5) {
				t.Errorf("%s timeoutSeconds %v", kind, to)
			}
		}
	},
}, {
	name: "manager flags",
	kv: []any{"manager.drainDelay", "5s", "manager.connectionDrainTimeout", "30s", "manager.gracefulShutdownTimeout", "20s", "manager.logLevel", "debug", "manager.tlsMinVersion13", true,
		"manager.leaderElection.leaseDuration", "30s", "manager.leaderElection.renewDeadline", "20s", "manager.leaderElection.retryPeriod", "4s",
		"manager.extraArgs", []any{"--conversion-max-body-bytes=1000000"}, "terminationGracePeriodSeconds", 45},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		d := deployment(t, objs)
		for _, a := range []string{"--drain-delay=5s", "--connection-drain-timeout=30s", "--graceful-shutdown-timeout=20s", "--zap-log-level=debug", "--tls-min-version-1.3",
			"--conversion-max-body-bytes=1000000"} {
			wantArg(t, d.Spec.Template.Spec.Containers[0].Args, a)
		}
		for _, a := range []string{"--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s",
			"--graceful-shutdown-timeout=20s", "--zap-log-level=debug", "--conversion-max-body-bytes=1000000"} {
			wantArg(t, controllerDeployment(t, objs).Spec.Template.Spec.Containers[0].Args, a)
		}
		if *d.Spec.Template.Spec.TerminationGracePeriodSeconds != 45 {
			t.Error("terminationGracePeriodSeconds")
		}
	},
}, {
	name: "scheduling",
	kv: []any{"priorityClassName", "system-cluster-critical", "podAntiAffinity", false, "zoneSpread", false,
		"nodeSelector", map[string]any{"kubernetes.io/os": "linux"}, "tolerations", []any{map[string]any{"key": "k", "operator": "Exists"}},
		"podAnnotations", map[string]any{"a": "b"}, "podLabels", map[string]any{"team": "widgets"}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		d := deployment(t, objs)
		pod := d.Spec.Template
		if pod.Spec.PriorityClassName != "system-cluster-critical" || pod.Spec.Affinity != nil || pod.Spec.TopologySpreadConstraints != nil ||
			pod.Spec.NodeSelector["kubernetes.io/os"] != "linux" || pod.Spec.Tolerations[0].Key != "k" ||
			pod.Annotations["a"] != "b" || pod.Labels["team"] != "widgets" || d.Spec.Selector.MatchLabels["team"] != "" {
			t.Errorf("pod template: %+v", pod)
		}
	},
}, {
	name: "affinity replaces the default anti-affinity",
	kv: []any{"affinity", map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"ops"}}}}}}}}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		a := deployment(t, objs).Spec.Template.Spec.Affinity
		if a.PodAntiAffinity != nil || a.NodeAffinity == nil {
			t.Errorf("affinity %+v", a)
		}
	},
}, {
	name: "resources",
	kv: []any{"resources", map[string]any{"limits": map[string]any{"cpu": "1", "memory": "512Mi"}},
		"hookPods.resources", map[string]any{"limits": map[string]any{"cpu": "200m", "memory": "100Mi"}}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		l := deployment(t, objs).Spec.Template.Spec.Containers[0].Resources
		h := job(t, objs, "widget-operator-preflight").Spec.Template.Spec.Containers[0].Resources
		// Helm merges maps: the default requests stay.
		if l.Limits.Memory().String() != "512Mi" || l.Requests.Cpu().String() != "100m" || h.Limits.Cpu().String() != "200m" {
			t.Errorf("resources %+v hooks %+v", l, h)
		}
	},
}, {
	name: "service account annotations",
	kv:   []any{"serviceAccount.annotations", map[string]any{"iam.example.com/role": "wo"}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if objs.Get("ServiceAccount", "widget-operator").GetAnnotations()["iam.example.com/role"] != "wo" {
			t.Error("annotation missing")
		}
	},
}, {
	name: "metrics off",
	kv:   []any{"metrics.port", 0, "monitoring.serviceMonitor.enabled", true, "monitoring.prometheusRule.enabled", true},
	apis: helmtemplate.MonitoringAPIs,
	check: func(t *testing.T, objs helmtemplate.Objects) {
		wantArg(t, deployment(t, objs).Spec.Template.Spec.Containers[0].Args, "--metrics-bind-address=0")
		if objs.Get("Service", "widget-operator-metrics") != nil || len(objs.Kind("ServiceMonitor")) != 0 {
			t.Error("metrics Service or ServiceMonitor without metrics")
		}
		// Nothing scrapes the manager: its rules would only fire for good (WidgetWebhookDown).
		if len(objs.Kind("PrometheusRule")) != 0 {
			t.Error("PrometheusRule without metrics")
		}
	},
}, {
	name: "ServiceMonitor and PrometheusRule without the API: nothing",
	kv:   []any{"monitoring.serviceMonitor.enabled", true, "monitoring.prometheusRule.enabled", true},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if len(objs.Kind("ServiceMonitor"))+len(objs.Kind("PrometheusRule")) != 0 {
			t.Error("monitoring objects rendered without their API")
		}
	},
}, {
	name: "ServiceMonitor and PrometheusRule",
	kv: []any{"monitoring.serviceMonitor.enabled", true, "monitoring.serviceMonitor.interval", "15s", "monitoring.serviceMonitor.labels", map[string]any{"release": "prom"},
		"monitoring.prometheusRule.enabled", true, "monitoring.prometheusRule.labels", map[string]any{"role": "alerts"},
		"monitoring.job", "wo-prod", "monitoring.runbookBaseURL", "https://runbooks.example.com/wo/", "replicaCount", 3, "metrics.port", 9443 + 1},
	apis: helmtemplate.MonitoringAPIs,
	check: func(t *testing.T, objs helmtemplate.Objects) {
		sm := objs.Get("ServiceMonitor", "widget-operator")
		if sm.GetLabels()["release"] != "prom" || field(t, sm, "spec", "jobLabel") != "widgetry.io/prometheus-job" {
			t.Errorf("ServiceMonitor %v", sm.Object)
		}
		ep := field(t, sm, "spec", "endpoints").([]any)[0].(map[string]any)
		if ep["interval"] != "15s" || ep["scheme"] != "https" || ep["port"] != "https-metrics" {
			t.Errorf("endpoint %v", ep)
		}
		svc := objs.Get("Service", "widget-operator-metrics")
		if svc.GetLabels()["widgetry.io/prometheus-job"] != "wo-prod" || field(t, svc, "spec", "ports").([]any)[0].(map[string]any)["port"] != int64(9444) {
			t.Errorf("metrics Service %v", svc.Object)
		}
		pr := objs.Get("PrometheusRule", "widget-operator")
		if pr.GetLabels()["role"] != "alerts" {
			t.Error("PrometheusRule labels")
		}
		b, _ := json.Marshal(pr.Object)
		for _, s := range []string{`job=\"wo-prod\"`, "https://runbooks.example.com/wo/alerts/", "of 3 webhook-plane replicas"} {
			if !strings.Contains(string(b), s) {
				t.Errorf("PrometheusRule lacks %q", s)
			}
		}
	},
}, {
	name: "dashboards",
	kv: []any{"monitoring.dashboards.enabled", true, "monitoring.dashboards.label", "grafana_dashboard", "monitoring.dashboards.labelValue", "yes",
		"monitoring.dashboards.annotations", map[string]any{"grafana_folder": "Widgets"}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		files, _ := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
		cms := dashboardConfigMaps(objs)
		if len(cms) != len(files) || len(files) == 0 {
			t.Fatalf("%d dashboard ConfigMaps for %d dashboards", len(cms), len(files))
		}
		for _, f := range files {
			name := strings.TrimPrefix(strings.TrimSuffix(filepath.Base(f), ".json"), "widget-operator-")
			cm := objs.Get("ConfigMap", "widget-operator-dashboard-"+name)
			want, _ := os.ReadFile(f)
			if cm == nil || cm.GetLabels()["grafana_dashboard"] != "yes" || cm.GetAnnotations()["grafana_folder"] != "Widgets" {
				t.Fatalf("ConfigMap for %s: %v", f, cm)
			}
			if got := field(t, cm, "data", filepath.Base(f)); got != strings.TrimSuffix(string(want), "\n") {
				t.Errorf("dashboard %s differs from dashboards/", f)
			}
		}
	},
}, {
	name: "NetworkPolicy",
	kv: []any{"networkPolicy.enabled", true, "networkPolicy.metricsNamespaceSelector", map[string]any{"matchLabels": map[string]any{"name": "monitoring"}},
		"networkPolicy.metricsPodSelector", map[string]any{"matchLabels": map[string]any{"app": "prometheus"}}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		np := &networkingv1.NetworkPolicy{}
		if err := helmtemplate.Into(objs.Get("NetworkPolicy", "widget-operator"), np); err != nil {
			t.Fatal(err)
		}
		in := np.Spec.Ingress
		if len(in) != 2 || in[0].From != nil || in[0].Ports[0].Port.IntValue() != 9443 ||
			in[1].From[0].NamespaceSelector.MatchLabels["name"] != "monitoring" || in[1].From[0].PodSelector.MatchLabels["app"] != "prometheus" || in[1].Ports[0].Port.IntValue() != 8443 {
			t.Errorf("ingress %+v", in)
		}
	},
}, {
	name: "stage unserve: the traffic check's window and override, and the backup-drilled override, reach the preflight; the managedFields hook",
	kv: []any{"apiUpgrade.stage", "unserve", "apiUpgrade.oldVersionTraffic.window", "90m",
		"apiUpgrade.oldVersionTraffic.allowReason", "INC-7: the batch job moves next week", "apiUpgrade.backup.allowReason", "INC-8: restored on staging"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		a := job(t, objs, "widget-operator-preflight").Spec.Template.Spec.Containers[0].Args
		for _, want := range []string{"--records-namespace", "--old-version-traffic-window=90m", "--allow-old-version-traffic=INC-7: the batch job moves next week", "--allow-undrilled-backup=INC-8: restored on staging"} {
			if !slices.Contains(a, want) {
				t.Errorf("preflight args %v lack %q", a, want)
			}
		}
		d := job(t, objs, "widget-operator-drop-managed-fields")
		if d == nil || d.Annotations["helm.sh/hook"] != "post-install,post-upgrade" || d.Annotations["helm.sh/hook-weight"] != "1" ||
			!slices.Equal(d.Spec.Template.Spec.Containers[0].Args, []string{"migrate", "--crd", "widgets.widgetry.io", "--progress-namespace", "widget-system", "--seal-checkpoints", "--drop-managed-fields-of", "v1alpha1"}) {
			t.Errorf("drop-managed-fields Job: %+v", d)
		}
	},
}, {
	name: "census: the hooks may list Helm's release records only when asked; the override reaches the preflight",
	kv:   []any{"apiUpgrade.stage", "unserve", "apiUpgrade.census.rbac", true, "apiUpgrade.census.allowReason", "INC-9: shop moves next sprint"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		a := job(t, objs, "widget-operator-preflight").Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(a, "--allow-old-release-manifests=INC-9: shop moves next sprint") {
			t.Errorf("preflight args %v lack the census override", a)
		}
		r := &rbacv1.ClusterRole{}
		if err := helmtemplate.Into(objs.Get("ClusterRole", "widget-operator-hooks"), r); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
			return slices.Equal(rule.Resources, []string{"secrets", "configmaps"}) && slices.Equal(rule.Verbs, []string{"list"}) && len(rule.ResourceNames) == 0
		}) {
			t.Errorf("the hooks' ClusterRole with apiUpgrade.census.rbac: %+v", r.Rules)
		}
		for _, res := range []string{"applications", "kustomizations"} {
			if !slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
				return slices.Equal(rule.Resources, []string{res}) && slices.Equal(rule.Verbs, []string{"list"})
			}) {
				t.Errorf("the hooks' ClusterRole with apiUpgrade.census.rbac cannot list %s: %+v", res, r.Rules)
			}
		}
		def := render(t, map[string]any{"apiUpgrade": map[string]any{"stage": "unserve"}})
		if err := helmtemplate.Into(def.Get("ClusterRole", "widget-operator-hooks"), r); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Resources, "secrets") }) {
			t.Errorf("the hooks list Secrets by default: %+v", r.Rules)
		}
	},
}, {
	name: "stage remove: no v1alpha1 in the CRD, no managedFields hook, the traffic check without an override",
	kv:   []any{"apiUpgrade.stage", "remove"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if objs.Get("Job", "widget-operator-drop-managed-fields") != nil {
			t.Error("the managedFields hook runs at unserve only")
		}
		a := job(t, objs, "widget-operator-preflight").Spec.Template.Spec.Containers[0].Args
		if a[3] != "remove" || !slices.Contains(a, "--old-version-traffic-window=24h") || slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--allow-old-version-traffic") }) {
			t.Errorf("preflight args %v", a)
		}
		c := &apiextensionsv1.CustomResourceDefinition{}
		if err := helmtemplate.Into(objs.Get("CustomResourceDefinition", "widgets.widgetry.io"), c); err != nil {
			t.Fatal(err)
		}
		if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != "v1" || !c.Spec.Versions[0].Served || !c.Spec.Versions[0].Storage {
			t.Errorf("CRD versions at remove: %+v", c.Spec.Versions)
		}
	},
}, {
	name: "stage migrate: migration hook",
	kv:   []any{"apiUpgrade.stage", "migrate", "apiUpgrade.backoffLimit", 2, "apiUpgrade.activeDeadlineSeconds", 3600},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		m := job(t, objs, "widget-operator-migrate")
		// After wait-webhooks (weight 0): the migration needs the webhooks too.
		if m == nil || m.Annotations["helm.sh/hook"] != "post-install,post-upgrade" || m.Annotations["helm.sh/hook-weight"] != "1" ||
			*m.Spec.BackoffLimit != 2 || *m.Spec.ActiveDeadlineSeconds != 3600 ||
			!slices.Equal(m.Spec.Template.Spec.Containers[0].Args, []string{"migrate", "--crd", "widgets.widgetry.io", "--progress-namespace", "widget-system", "--seal-checkpoints"}) {
			t.Errorf("migrate Job: %+v", m)
		}
		if a := job(t, objs, "widget-operator-preflight").Spec.Template.Spec.Containers[0].Args; a[3] != "migrate" {
			t.Errorf("preflight args %v", a)
		}
	},
}, {
	name: "hooks off",
	kv:   []any{"apiUpgrade.hooks", false, "apiUpgrade.stage", "migrate"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if job(t, objs, "widget-operator-preflight") != nil || job(t, objs, "widget-operator-migrate") != nil ||
			job(t, objs, "widget-operator-wait-webhooks") != nil || job(t, objs, "widget-operator-cleanup-finalizers") == nil {
			t.Error("want only the pre-delete cleanup Job")
		}
	},
}, {
	name: "unsafe uninstall accepted",
	kv:   []any{"apiUpgrade.allowUnsafeUninstall", true},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if a := job(t, objs, "widget-operator-cleanup-finalizers").Spec.Template.Spec.Containers[0].Args; !slices.Contains(a, "--allow-unsafe-uninstall=true") {
			t.Errorf("cleanup-finalizers args %v", a)
		}
	},
}, {
	name: "test namespace",
	kv:   []any{"tests.namespace", "widget-smoke"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		jsonEq(t, "selftest args", field(t, objs.Get("Pod", "widget-operator-selftest"), "spec", "containers").([]any)[0].(map[string]any)["args"],
			[]string{"--reason=helm hook selftest of release widget-operator, revision 1", "selftest", "--namespace", "widget-smoke"})
	},
}}

// coveredBelow: a case sets a key inside the value at path (podSecurityContext.runAsUser
// sets podSecurityContext).
func coveredBelow(covered map[string]bool, path string) bool {
	for p := range covered {
		if strings.HasPrefix(p, path+".") {
			return true
		}
	}
	return false
}

// TestValues renders every case with Helm 3 and checks what its values change; every value of
// values.yaml must be set by some case.
func TestValues(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range append(valueCases, optionCases...) {
		for _, p := range paths(tc.kv...) {
			covered[p] = true
		}
		t.Run(tc.name, func(t *testing.T) {
			var values map[string]any
			if len(tc.kv) > 0 {
				values = set(tc.kv...)
			}
			tc.check(t, render(t, values, tc.apis...))
		})
	}
	raw, err := os.ReadFile(filepath.Join(root, ValuesPath))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := Values(raw)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, v := range vals {
		if !covered[v.Path] && !coveredBelow(covered, v.Path) && v.Path != "apiUpgrade.stage" { // every stage: TestCRDEveryStage
			missing = append(missing, v.Path)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("values no render test sets: %v", missing)
	}
}

// dashboardConfigMaps are the rendered ConfigMaps but the release-info one.
func dashboardConfigMaps(objs helmtemplate.Objects) helmtemplate.Objects {
	var out helmtemplate.Objects
	for _, cm := range objs.Kind("ConfigMap") {
		if cm.GetLabels()["app.kubernetes.io/component"] != "release-info" {
			out = append(out, cm)
		}
	}
	return out
}

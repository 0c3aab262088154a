//go:build envtest

package chart

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// eachPod runs check on every pod spec the chart creates (podSpecs), naming the pod in
// failures.
func eachPod(t *testing.T, objs helmtemplate.Objects, check func(t *testing.T, what string, spec corev1.PodSpec)) {
	t.Helper()
	specs := podSpecs(t, objs)
	if len(specs) < 6 {
		t.Fatalf("want the two planes, at least 3 hook Jobs and the test pod, got %d", len(specs))
	}
	for what, spec := range specs {
		check(t, what, spec)
	}
}

// hookPods are the pod specs of the hook Jobs and the test pod.
func hookPods(t *testing.T, objs helmtemplate.Objects, check func(t *testing.T, what string, spec corev1.PodSpec)) {
	t.Helper()
	eachPod(t, objs, func(t *testing.T, what string, spec corev1.PodSpec) {
		if !strings.HasPrefix(what, "Deployment ") {
			check(t, what, spec)
		}
	})
}

// automounts reads a ServiceAccount's automountServiceAccountToken (which the chart always sets).
func automounts(t *testing.T, sa *unstructured.Unstructured) bool {
	t.Helper()
	v, ok := field(t, sa, "automountServiceAccountToken").(bool)
	if !ok {
		t.Fatalf("ServiceAccount %s: automountServiceAccountToken is not a boolean", sa.GetName())
	}
	return v
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// optionCases are the options platform teams set to fit the chart to their cluster: each
// reaches every pod it should, the hook Jobs' and the test pod's included.
var optionCases = []valueCase{{
	name: "defaults: linux nodes, system-cluster-critical with its quota, ClusterFirst DNS, the restricted contexts",
	check: func(t *testing.T, objs helmtemplate.Objects) {
		eachPod(t, objs, func(t *testing.T, what string, spec corev1.PodSpec) {
			if spec.NodeSelector["kubernetes.io/os"] != "linux" || spec.HostNetwork {
				t.Errorf("%s: nodeSelector %v hostNetwork %t", what, spec.NodeSelector, spec.HostNetwork)
			}
			if sc := spec.SecurityContext; sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.FSGroup == nil || *sc.FSGroup != 65532 {
				t.Errorf("%s: pod securityContext %+v", what, sc)
			}
		})
		pod := deployment(t, objs).Spec.Template.Spec
		if pod.PriorityClassName != "system-cluster-critical" || pod.DNSPolicy != corev1.DNSClusterFirst || pod.ServiceAccountName != "widget-operator" {
			t.Errorf("manager pod: priorityClassName %q dnsPolicy %q serviceAccountName %q", pod.PriorityClassName, pod.DNSPolicy, pod.ServiceAccountName)
		}
		hookPods(t, objs, func(t *testing.T, what string, spec corev1.PodSpec) {
			if spec.PriorityClassName != "" {
				t.Errorf("%s: priorityClassName %q by default", what, spec.PriorityClassName)
			}
		})
		quota := &corev1.ResourceQuota{}
		if err := helmtemplate.Into(objs.Get("ResourceQuota", "widget-operator-critical-pods"), quota); err != nil {
			t.Fatal(err)
		}
		sel := quota.Spec.ScopeSelector.MatchExpressions
		// Five times both planes' replicas (2 + 2).
		if quota.Spec.Hard.Pods().Value() != 20 || len(sel) != 1 || sel[0].ScopeName != corev1.ResourceQuotaScopePriorityClass ||
			!slices.Equal(sel[0].Values, []string{"system-cluster-critical"}) {
			t.Errorf("critical-pods quota: %+v", quota.Spec)
		}
		for _, name := range []string{"widget-operator", "widget-operator-controller"} {
			if sa := objs.Get("ServiceAccount", name); sa == nil || !automounts(t, sa) {
				t.Errorf("ServiceAccount %s: %v", name, sa)
			}
		}
		if ctl := controllerDeployment(t, objs).Spec.Template.Spec; ctl.PriorityClassName != "system-cluster-critical" || ctl.ServiceAccountName != "widget-operator-controller" {
			t.Errorf("controller pod: priorityClassName %q serviceAccountName %q", ctl.PriorityClassName, ctl.ServiceAccountName)
		}
		// No token Secret without monitoring: the one Secret is the CA bundle's (empty).
		if secrets := objs.Kind("Secret"); len(secrets) != 1 || secrets[0].GetName() != "widget-operator-ca-bundle" {
			t.Errorf("Secrets rendered by default: %d", len(secrets))
		}
	},
}, {
	name: "no quota: another class, the quota off, or kube-system",
	kv:   []any{"priorityClassName", "", "criticalPodsQuota.enabled", true, "criticalPodsQuota.pods", 20},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if deployment(t, objs).Spec.Template.Spec.PriorityClassName != "" || len(objs.Kind("ResourceQuota")) != 0 {
			t.Error("want no priorityClassName and no quota")
		}
		for _, values := range []map[string]any{set("criticalPodsQuota.enabled", false), nil} {
			ns := "widget-system"
			if values == nil {
				ns = "kube-system"
			}
			out, err := helmtemplate.Render(helmtemplate.Options{Helm: tool(t, "helm3"), Chart: chartDir, Namespace: ns, Values: values})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), "kind: ResourceQuota") {
				t.Errorf("a ResourceQuota with %v in %s", values, ns)
			}
		}
		quota := render(t, set("criticalPodsQuota.pods", 20, "priorityClassName", "system-node-critical")).Get("ResourceQuota", "widget-operator-critical-pods")
		jsonEq(t, "quota", []any{field(t, quota, "spec", "hard", "pods"), field(t, quota, "spec", "scopeSelector", "matchExpressions")},
			[]any{"20", []any{map[string]any{"scopeName": "PriorityClass", "operator": "In", "values": []string{"system-node-critical"}}}})
	},
}, {
	name: "host network with its own ports",
	kv:   []any{"hostNetwork", true, "webhook.port", 10260, "metrics.port", 10261, "manager.healthPort", 10262},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		pod := deployment(t, objs).Spec.Template.Spec
		if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			t.Errorf("hostNetwork %t dnsPolicy %s", pod.HostNetwork, pod.DNSPolicy)
		}
		c := pod.Containers[0]
		for _, a := range []string{"--webhook-port=10260", "--metrics-bind-address=:10261", "--health-probe-bind-address=:10262"} {
			wantArg(t, c.Args, a)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		jsonEq(t, "container ports", ports, map[string]int32{"webhook": 10260, "metrics": 10261, "health": 10262})
		if c.ReadinessProbe.HTTPGet.Port.String() != "health" {
			t.Errorf("readiness probe port %s", c.ReadinessProbe.HTTPGet.Port.String())
		}
		if ctl := controllerDeployment(t, objs).Spec.Template.Spec; ctl.HostNetwork || ctl.DNSPolicy != corev1.DNSClusterFirst {
			t.Errorf("the controller plane: hostNetwork %t dnsPolicy %s (it serves no webhook)", ctl.HostNetwork, ctl.DNSPolicy)
		}
		hookPods(t, objs, func(t *testing.T, what string, spec corev1.PodSpec) {
			if spec.HostNetwork {
				t.Errorf("%s on the host network", what)
			}
		})
	},
}, {
	name: "dnsPolicy",
	kv:   []any{"hostNetwork", true, "dnsPolicy", "Default"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if p := deployment(t, objs).Spec.Template.Spec.DNSPolicy; p != corev1.DNSDefault {
			t.Errorf("dnsPolicy %s", p)
		}
	},
}, {
	name: "image registry and digest, pull secrets on every pod",
	kv: []any{"image.registry", "registry.example.com/", "image.digest", digest,
		"imagePullSecrets", []any{map[string]any{"name": "pull"}, map[string]any{"name": "mirror"}}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		eachPod(t, objs, func(t *testing.T, what string, spec corev1.PodSpec) {
			if img := spec.Containers[0].Image; img != "registry.example.com/localhost/widget-operator@"+digest {
				t.Errorf("%s: image %s", what, img)
			}
			jsonEq(t, what+" imagePullSecrets", spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "pull"}, {Name: "mirror"}})
		})
	},
}, {
	name: "placement, priority and resources of the hook and test pods",
	kv: []any{"hookPods.nodeSelector", map[string]any{"pool": "system"},
		"hookPods.tolerations", []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}},
		"hookPods.affinity", map[string]any{"nodeAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
			map[string]any{"weight": 1, "preference": map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"system"}}}}}}}},
		"hookPods.priorityClassName", "system-cluster-critical"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		hookPods(t, objs, func(t *testing.T, what string, spec corev1.PodSpec) {
			// Helm merges maps: the default kubernetes.io/os stays beside pool.
			if spec.NodeSelector["pool"] != "system" || spec.NodeSelector["kubernetes.io/os"] != "linux" || len(spec.Tolerations) != 1 ||
				spec.Tolerations[0].Key != "dedicated" || spec.Affinity == nil || spec.Affinity.NodeAffinity == nil ||
				spec.PriorityClassName != "system-cluster-critical" || spec.Containers[0].Resources.Requests.Cpu().String() != "50m" {
				t.Errorf("%s: %+v", what, spec)
			}
		})
		pod := deployment(t, objs).Spec.Template.Spec
		if pod.NodeSelector["pool"] != "" || pod.Tolerations != nil {
			t.Errorf("the hooks' placement reached the manager: %v %v", pod.NodeSelector, pod.Tolerations)
		}
	},
}, {
	name: "more topology spread constraints, with and without a labelSelector",
	kv: []any{"zoneSpread", false, "topologySpreadConstraints", []any{
		map[string]any{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"},
		map[string]any{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": map[string]any{"matchLabels": map[string]any{"app": "x"}}}}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		tsc := deployment(t, objs).Spec.Template.Spec.TopologySpreadConstraints
		if len(tsc) != 2 || tsc[0].TopologyKey != "kubernetes.io/hostname" || tsc[0].LabelSelector.MatchLabels["app.kubernetes.io/component"] != "webhook" ||
			tsc[1].TopologyKey != "rack" || len(tsc[1].LabelSelector.MatchLabels) != 1 || tsc[1].LabelSelector.MatchLabels["app"] != "x" {
			t.Errorf("topologySpreadConstraints %+v", tsc)
		}
		if tsc := deployment(t, render(t, set("topologySpreadConstraints", []any{map[string]any{"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway"}}))).Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 2 || tsc[0].TopologyKey != "topology.kubernetes.io/zone" || tsc[1].TopologyKey != "rack" {
			t.Errorf("with the zone spread: %+v", tsc)
		}
	},
}, {
	name: "the controller plane's own priority and grace period; the quota admits both classes",
	kv:   []any{"controller.priorityClassName", "system-node-critical", "controller.terminationGracePeriodSeconds", 40},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		ctl := controllerDeployment(t, objs).Spec.Template.Spec
		if ctl.PriorityClassName != "system-node-critical" || *ctl.TerminationGracePeriodSeconds != 40 ||
			deployment(t, objs).Spec.Template.Spec.PriorityClassName != "system-cluster-critical" {
			t.Errorf("controller pod: priorityClassName %q grace %d", ctl.PriorityClassName, *ctl.TerminationGracePeriodSeconds)
		}
		quota := objs.Get("ResourceQuota", "widget-operator-critical-pods")
		jsonEq(t, "quota classes", field(t, quota, "spec", "scopeSelector", "matchExpressions"),
			[]any{map[string]any{"scopeName": "PriorityClass", "operator": "In", "values": []string{"system-cluster-critical", "system-node-critical"}}})
	},
}, {
	name: "budget by minAvailable",
	kv:   []any{"podDisruptionBudget.minAvailable", 2, "replicaCount", 3},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := helmtemplate.Into(objs.Get("PodDisruptionBudget", "widget-operator-webhook"), pdb); err != nil {
			t.Fatal(err)
		}
		if pdb.Spec.MinAvailable.IntValue() != 2 || pdb.Spec.MaxUnavailable != nil {
			t.Errorf("PDB %+v", pdb.Spec)
		}
	},
}, {
	name: "budget by maxUnavailable",
	kv:   []any{"podDisruptionBudget.maxUnavailable", "50%"},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := helmtemplate.Into(objs.Get("PodDisruptionBudget", "widget-operator-webhook"), pdb); err != nil {
			t.Fatal(err)
		}
		if pdb.Spec.MaxUnavailable.String() != "50%" || pdb.Spec.MinAvailable != nil {
			t.Errorf("PDB %+v", pdb.Spec)
		}
	},
}, {
	name: "security contexts overridden (OpenShift restricted-v2: no UID, GID or fsGroup)",
	kv: []any{"podSecurityContext.runAsUser", nil, "podSecurityContext.runAsGroup", nil, "podSecurityContext.fsGroup", nil,
		"containerSecurityContext.runAsUser", 1001},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		eachPod(t, objs, func(t *testing.T, what string, spec corev1.PodSpec) {
			psc, csc := spec.SecurityContext, spec.Containers[0].SecurityContext
			if psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.FSGroup != nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
				psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: pod securityContext %+v", what, psc)
			}
			if csc.RunAsUser == nil || *csc.RunAsUser != 1001 || !*csc.ReadOnlyRootFilesystem || *csc.AllowPrivilegeEscalation {
				t.Errorf("%s: container securityContext %+v", what, csc)
			}
		})
	},
}, {
	name: "an existing ServiceAccount",
	kv: []any{"serviceAccount.create", false, "serviceAccount.name", "platform-widgets", "controller.serviceAccountName", "platform-widgets-controller",
		"serviceAccount.automountServiceAccountToken", false},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if slices.ContainsFunc([]string{"widget-operator", "widget-operator-controller", "platform-widgets", "platform-widgets-controller"},
			func(n string) bool { return objs.Get("ServiceAccount", n) != nil }) {
			t.Error("the planes' ServiceAccounts rendered with serviceAccount.create=false")
		}
		for name, pod := range map[string]corev1.PodSpec{"platform-widgets": deployment(t, objs).Spec.Template.Spec,
			"platform-widgets-controller": controllerDeployment(t, objs).Spec.Template.Spec} {
			if pod.ServiceAccountName != name || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
				t.Errorf("pod: %s automount %v, want %s", pod.ServiceAccountName, pod.AutomountServiceAccountToken, name)
			}
		}
		for _, b := range []struct{ kind, name, sa string }{{"ClusterRoleBinding", "widget-operator-webhook", "platform-widgets"},
			{"ClusterRoleBinding", "widget-operator-controller", "platform-widgets-controller"}, {"RoleBinding", "widget-operator-controller", "platform-widgets-controller"}} {
			rb := &rbacv1.RoleBinding{}
			if err := helmtemplate.Into(objs.Get(b.kind, b.name), rb); err != nil {
				t.Fatalf("%s %s: %v", b.kind, b.name, err)
			}
			if rb.Subjects[0].Name != b.sa {
				t.Errorf("%s %s binds %s, want %s", b.kind, b.name, rb.Subjects[0].Name, b.sa)
			}
		}
		sa := render(t, set("serviceAccount.name", "platform-widgets", "serviceAccount.automountServiceAccountToken", false)).Get("ServiceAccount", "platform-widgets")
		if sa == nil || automounts(t, sa) {
			t.Errorf("named ServiceAccount: %v", sa)
		}
	},
}, {
	name: "common labels and annotations on every object and pod",
	kv: []any{"commonLabels", map[string]any{"team": "platform"}, "commonAnnotations", map[string]any{"widgetry.io/owner": "platform-team"},
		"monitoring.serviceMonitor.enabled", true, "monitoring.prometheusRule.enabled", true, "monitoring.dashboards.enabled", true,
		"networkPolicy.enabled", true, "podAnnotations", map[string]any{"a": "b"}},
	apis: helmtemplate.MonitoringAPIs,
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if len(objs) < 35 {
			t.Fatalf("only %d objects", len(objs))
		}
		for _, o := range objs {
			if o.GetLabels()["team"] != "platform" || o.GetAnnotations()["widgetry.io/owner"] != "platform-team" {
				t.Errorf("%s %s: labels %v annotations %v", o.GetKind(), o.GetName(), o.GetLabels(), o.GetAnnotations())
			}
			if o.GetKind() == "Job" || o.GetKind() == "Deployment" {
				meta, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "metadata")
				b, _ := json.Marshal(meta)
				if !strings.Contains(string(b), `"team":"platform"`) || !strings.Contains(string(b), `"widgetry.io/owner":"platform-team"`) {
					t.Errorf("%s %s pod template: %s", o.GetKind(), o.GetName(), b)
				}
			}
		}
		if deployment(t, objs).Spec.Template.Annotations["a"] != "b" {
			t.Error("podAnnotations lost beside commonAnnotations")
		}
		if d := deployment(t, objs); d.Spec.Selector.MatchLabels["team"] != "" {
			t.Error("a common label in the Deployment's (immutable) selector")
		}
		// The hook annotations stay as they were.
		if job(t, objs, "widget-operator-preflight").Annotations["helm.sh/hook"] != "pre-install,pre-upgrade,pre-rollback" {
			t.Error("the preflight's hook annotation")
		}
	},
}, {
	name: "extra env and volumes, probe timings",
	kv: []any{"manager.extraEnv", []any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}},
		"manager.extraVolumes", []any{map[string]any{"name": "ca", "configMap": map[string]any{"name": "corp-ca"}}},
		"manager.extraVolumeMounts", []any{map[string]any{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": true}},
		"manager.probes.startup", map[string]any{"failureThreshold": 60}, "manager.probes.liveness", map[string]any{"timeoutSeconds": 5, "periodSeconds": 20},
		"manager.probes.readiness", map[string]any{"periodSeconds": 3, "initialDelaySeconds": 1}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		pod := deployment(t, objs).Spec.Template.Spec
		c := pod.Containers[0]
		if e := c.Env[len(c.Env)-1]; e.Name != "HTTPS_PROXY" || e.Value != "http://proxy:3128" || c.Env[0].Name != "POD_NAMESPACE" {
			t.Errorf("env %+v", c.Env)
		}
		if v := pod.Volumes[len(pod.Volumes)-1]; v.Name != "ca" || v.ConfigMap.Name != "corp-ca" || pod.Volumes[0].Name != "serving-certs" {
			t.Errorf("volumes %+v", pod.Volumes)
		}
		if m := c.VolumeMounts[len(c.VolumeMounts)-1]; m.MountPath != "/etc/ssl/corp" || !m.ReadOnly {
			t.Errorf("mounts %+v", c.VolumeMounts)
		}
		// Helm merges maps: the timings not set keep their defaults.
		s, l, r := c.StartupProbe, c.LivenessProbe, c.ReadinessProbe
		got := []int32{s.FailureThreshold, s.PeriodSeconds, l.TimeoutSeconds, l.PeriodSeconds, l.FailureThreshold, r.PeriodSeconds, r.InitialDelaySeconds, r.FailureThreshold}
		jsonEq(t, "probe timings", got, []int32{60, 2, 5, 20, 3, 3, 1, 2})
	},
}, {
	name: "ServiceMonitor with the chart's scraper token, timeout, relabelings; rules and dashboards elsewhere",
	kv: []any{"monitoring.serviceMonitor.enabled", true, "monitoring.serviceMonitor.scrapeTimeout", "10s",
		"monitoring.serviceMonitor.relabelings", []any{map[string]any{"targetLabel": "cluster", "replacement": "prod"}},
		"monitoring.serviceMonitor.metricRelabelings", []any{map[string]any{"sourceLabels": []any{"__name__"}, "regex": "go_gc_.*", "action": "drop"}},
		"monitoring.prometheusRule.enabled", true, "monitoring.prometheusRule.namespace", "monitoring",
		"monitoring.dashboards.enabled", true, "monitoring.dashboards.namespace", "grafana"},
	apis: helmtemplate.MonitoringAPIs,
	check: func(t *testing.T, objs helmtemplate.Objects) {
		sm := objs.Get("ServiceMonitor", "widget-operator")
		ep := field(t, sm, "spec", "endpoints").([]any)[0].(map[string]any)
		if _, ok := ep["bearerTokenFile"]; ok {
			t.Error("bearerTokenFile (OpenShift's user-workload monitoring refuses it)")
		}
		jsonEq(t, "authorization", ep["authorization"], map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "widget-operator-metrics-scraper-token", "key": "token"}})
		jsonEq(t, "timeout and relabelings", []any{ep["scrapeTimeout"], ep["relabelings"], ep["metricRelabelings"]}, []any{"10s",
			[]any{map[string]any{"targetLabel": "cluster", "replacement": "prod"}}, []any{map[string]any{"sourceLabels": []any{"__name__"}, "regex": "go_gc_.*", "action": "drop"}}})
		if sm.GetNamespace() != "widget-system" || objs.Get("PrometheusRule", "widget-operator").GetNamespace() != "monitoring" {
			t.Error("namespaces of the ServiceMonitor or PrometheusRule")
		}
		for _, cm := range dashboardConfigMaps(objs) {
			if cm.GetNamespace() != "grafana" {
				t.Errorf("dashboard %s in %s", cm.GetName(), cm.GetNamespace())
			}
		}
		secret := objs.Get("Secret", "widget-operator-metrics-scraper-token")
		if secret == nil || field(t, secret, "type") != "kubernetes.io/service-account-token" ||
			secret.GetAnnotations()["kubernetes.io/service-account.name"] != "widget-operator-metrics-scraper" || objs.Get("ServiceAccount", "widget-operator-metrics-scraper") == nil {
			t.Errorf("scraper token Secret %v", secret)
		}
		crb := &rbacv1.ClusterRoleBinding{}
		if err := helmtemplate.Into(objs.Get("ClusterRoleBinding", "widget-operator-metrics-scraper"), crb); err != nil {
			t.Fatal(err)
		}
		if crb.RoleRef.Name != "widget-operator-metrics-reader" || crb.Subjects[0].Name != "widget-operator-metrics-scraper" || crb.Subjects[0].Namespace != "widget-system" {
			t.Errorf("scraper binding %+v", crb)
		}
	},
}, {
	name: "ServiceMonitor in another namespace with its own authorization and TLS",
	kv: []any{"monitoring.serviceMonitor.enabled", true, "monitoring.serviceMonitor.namespace", "openshift-user-workload-monitoring",
		"monitoring.serviceMonitor.authorization", map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "prom-token", "key": "token"}},
		"monitoring.serviceMonitor.tlsConfig", map[string]any{"serverName": "widget-operator-metrics.widget-system.svc", "ca": map[string]any{"configMap": map[string]any{"name": "service-ca", "key": "service-ca.crt"}}}},
	apis: helmtemplate.MonitoringAPIs,
	check: func(t *testing.T, objs helmtemplate.Objects) {
		sm := objs.Get("ServiceMonitor", "widget-operator")
		ep := field(t, sm, "spec", "endpoints").([]any)[0].(map[string]any)
		if sm.GetNamespace() != "openshift-user-workload-monitoring" || ep["authorization"].(map[string]any)["credentials"].(map[string]any)["name"] != "prom-token" ||
			ep["tlsConfig"].(map[string]any)["ca"].(map[string]any)["configMap"] == nil {
			t.Errorf("ServiceMonitor %v", sm.Object)
		}
		if objs.Get("Secret", "widget-operator-metrics-scraper-token") != nil || objs.Get("ServiceAccount", "widget-operator-metrics-scraper") != nil {
			t.Error("the chart's scraper beside a given authorization")
		}
		jsonEq(t, "namespaceSelector", field(t, sm, "spec", "namespaceSelector"), map[string]any{"matchNames": []string{"widget-system"}})
	},
}, {
	name: "NetworkPolicy: webhook only from the control plane and the hooks; egress to the apiserver and DNS",
	kv: []any{"networkPolicy.enabled", true, "webhook.allowedCIDRs", []any{"10.0.0.0/24"},
		"networkPolicy.egress.enabled", true, "networkPolicy.egress.apiServerPorts", []any{6443}, "networkPolicy.egress.apiServerCIDRs", []any{"10.0.0.10/32"}, "networkPolicy.egress.dns", true},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		np := &networkingv1.NetworkPolicy{}
		if err := helmtemplate.Into(objs.Get("NetworkPolicy", "widget-operator"), np); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
			t.Errorf("policyTypes %v", np.Spec.PolicyTypes)
		}
		// From the control plane, the hooks, and the release's pods (the elected controller asks
		// each webhook replica which certificate it serves, for the CA bundle).
		from := np.Spec.Ingress[0].From
		if len(from) != 3 || from[0].IPBlock.CIDR != "10.0.0.0/24" || from[1].PodSelector.MatchLabels["app.kubernetes.io/component"] != "hooks" ||
			from[2].PodSelector.MatchLabels["app.kubernetes.io/instance"] != "widget-operator" || from[2].PodSelector.MatchLabels["app.kubernetes.io/component"] != "" {
			t.Errorf("webhook ingress from %+v", from)
		}
		if sel := np.Spec.PodSelector.MatchLabels; sel["app.kubernetes.io/instance"] != "widget-operator" || sel["app.kubernetes.io/component"] != "" {
			t.Errorf("the policy selects %v, want both planes' pods", sel)
		}
		eg := np.Spec.Egress
		if len(eg) != 3 || eg[0].Ports[0].Port.IntValue() != 6443 || eg[0].To[0].IPBlock.CIDR != "10.0.0.10/32" ||
			eg[1].Ports[0].Port.IntValue() != 9443 || eg[1].To[0].PodSelector.MatchLabels["widgetry.io/serves-webhooks"] != "true" ||
			eg[2].Ports[0].Port.IntValue() != 53 || *eg[2].Ports[0].Protocol != corev1.ProtocolUDP || *eg[2].Ports[1].Protocol != corev1.ProtocolTCP {
			t.Errorf("egress %+v", eg)
		}
		np = &networkingv1.NetworkPolicy{}
		if err := helmtemplate.Into(render(t, set("networkPolicy.enabled", true, "networkPolicy.egress.enabled", false)).Get("NetworkPolicy", "widget-operator"), np); err != nil {
			t.Fatal(err)
		}
		if np.Spec.Egress != nil || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("egress off: %+v", np.Spec)
		}
	},
}, {
	name: "controller container: its health port and resources",
	kv: []any{"manager.controllerHealthPort", 9082, "controllerResources", map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "32Mi"},
		"limits": map[string]any{"memory": "512Mi"}}},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		ctl := controllerDeployment(t, objs).Spec.Template.Spec.Containers[0]
		ports := map[string]int32{}
		for _, p := range ctl.Ports {
			ports[p.Name] = p.ContainerPort
		}
		if !slices.Contains(ctl.Args, "--health-probe-bind-address=:9082") || ports["health"] != 9082 || ports["metrics"] != 8443 ||
			ctl.Resources.Limits.Memory().String() != "512Mi" || ctl.Resources.Requests.Cpu().String() != "10m" {
			t.Errorf("controller container: args %v ports %+v resources %+v", ctl.Args, ctl.Ports, ctl.Resources)
		}
	},
}, {
	name: "CA bundle overlap (default): the bundle Secret, cainjector's source, the manager's flags and RBAC",
	check: func(t *testing.T, objs helmtemplate.Objects) {
		bundle := objs.Get("Secret", "widget-operator-ca-bundle")
		if bundle == nil || bundle.GetAnnotations()["cert-manager.io/allow-direct-injection"] != "true" || bundle.Object["data"] != nil {
			t.Fatalf("the bundle Secret: %v", bundle)
		}
		for _, o := range []struct{ kind, name string }{{"CustomResourceDefinition", "widgets.widgetry.io"},
			{"MutatingWebhookConfiguration", "widget-operator"}, {"ValidatingWebhookConfiguration", "widget-operator"}} {
			ann := objs.Get(o.kind, o.name).GetAnnotations()
			if ann["cert-manager.io/inject-ca-from-secret"] != "widget-system/widget-operator-ca-bundle" || ann["cert-manager.io/inject-ca-from"] != "" {
				t.Errorf("%s: %v", o.kind, ann)
			}
		}
		// The bundle's writer is the elected controller.
		args := controllerDeployment(t, objs).Spec.Template.Spec.Containers[0].Args
		for _, want := range []string{"--ca-bundle-secret=widget-operator-ca-bundle", "--serving-secret=widget-operator-serving-cert", "--webhook-service-name=widget-operator-webhook"} {
			if !slices.Contains(args, want) {
				t.Errorf("controller args lack %s: %v", want, args)
			}
		}
		role := &rbacv1.Role{}
		if err := helmtemplate.Into(objs.Get("Role", "widget-operator-controller"), role); err != nil {
			t.Fatal(err)
		}
		var grants []string
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "secrets") {
				grants = append(grants, strings.Join(r.Verbs, ",")+" "+strings.Join(r.ResourceNames, ","))
			}
		}
		if want := []string{"get widget-operator-serving-cert,widget-operator-ca-bundle", "update widget-operator-ca-bundle"}; !slices.Equal(grants, want) {
			t.Errorf("the manager's Secret grants %v, want %v (by name only)", grants, want)
		}
	},
}, {
	name: "CA bundle overlap off: cainjector injects from the serving Certificate, renewals served at once",
	kv:   []any{"certManager.caBundleOverlap", false},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		if objs.Get("Secret", "widget-operator-ca-bundle") != nil {
			t.Error("the bundle Secret is rendered without the overlap")
		}
		if ann := objs.Get("CustomResourceDefinition", "widgets.widgetry.io").GetAnnotations(); ann["cert-manager.io/inject-ca-from"] != "widget-system/widget-operator-serving" {
			t.Errorf("CRD annotations %v", ann)
		}
		pod := deployment(t, objs).Spec.Template.Spec
		ctl := controllerDeployment(t, objs).Spec.Template.Spec.Containers[0]
		if !slices.Contains(pod.Containers[0].Args, "--hold-untrusted-certificates=false") ||
			slices.ContainsFunc(ctl.Args, func(a string) bool { return strings.HasPrefix(a, "--ca-bundle-secret") }) {
			t.Errorf("webhook args %v, controller args %v", pod.Containers[0].Args, ctl.Args)
		}
		role := &rbacv1.Role{}
		if err := helmtemplate.Into(objs.Get("Role", "widget-operator-controller"), role); err != nil {
			t.Fatal(err)
		}
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "secrets") {
				t.Errorf("the manager may read Secrets without the overlap: %+v", r)
			}
		}
	},
}, {
	name: "mutation by the webhook alone",
	kv:   []any{"webhook.mutation", "webhook"},
	apis: []string{mutatingAdmissionPolicyAPI},
	check: func(t *testing.T, objs helmtemplate.Objects) {
		checkKeepingRoute(t, objs, false)
	},
}}

// TestValuesRefused: values each valid alone but wrong together fail helm template (so helm
// install) with a message naming them and what to do, with Helm 3 and Helm 4.
func TestValuesRefused(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		apis   []string
		want   []string
	}{
		{"webhook and health on one port", set("manager.healthPort", 9443), nil, []string{"webhook.port and manager.healthPort are both 9443"}},
		{"metrics and health on one port", set("metrics.port", 8081), nil, []string{"manager.healthPort and metrics.port are both 8081"}},
		{"the controller's health port on the manager's", set("manager.controllerHealthPort", 8081), nil, []string{"manager.healthPort and manager.controllerHealthPort are both 8081", "the controller's health server"}},
		{"lease not longer than the renew deadline", set("manager.leaderElection.leaseDuration", "10s"), nil, []string{"leaseDuration (10s) must be longer than renewDeadline (10s)"}},
		{"renew deadline too close to the retry period", set("manager.leaderElection.retryPeriod", "9s"), nil, []string{"renewDeadline (10s)", "retryPeriod (9s)"}},
		{"renewal after expiry", set("certManager.duration", "720h", "certManager.renewBefore", "30d"), nil, []string{"/certManager/renewBefore"}},
		{"renewal not before expiry", set("certManager.duration", "720h", "certManager.renewBefore", "43200m"), nil, []string{"certManager.renewBefore (43200m) must be shorter than certManager.duration (720h)"}},
		{"CA renewal not before expiry", set("certManager.caDuration", "1h", "certManager.caRenewBefore", "2h"), nil, []string{"certManager.caRenewBefore (2h) must be shorter than certManager.caDuration (1h)"}},
		{"grace period shorter than the drain", set("terminationGracePeriodSeconds", 30), nil, []string{"terminationGracePeriodSeconds (30) must exceed manager.drainDelay + manager.gracefulShutdownTimeout (10s + 30s)"}},
		{"grace period shorter than the connection drain", set("terminationGracePeriodSeconds", 100), nil, []string{"terminationGracePeriodSeconds (100) must exceed manager.connectionDrainTimeout (95s) by more than 5 s"}},
		{"connection drain shorter than the drain delay", set("manager.connectionDrainTimeout", "5s"), nil, []string{"manager.connectionDrainTimeout (5s) must not be shorter than manager.drainDelay (10s)"}},
		{"both budget fields", set("podDisruptionBudget.minAvailable", 1, "podDisruptionBudget.maxUnavailable", 1), nil, []string{"minAvailable or maxUnavailable, not both"}},
		{"no ServiceAccount", set("serviceAccount.create", false), nil, []string{"serviceAccount.create=false needs serviceAccount.name"}},
		{"ServiceMonitor elsewhere without TLS", set("monitoring.serviceMonitor.enabled", true, "monitoring.serviceMonitor.namespace", "monitoring"), helmtemplate.MonitoringAPIs,
			[]string{"give monitoring.serviceMonitor.tlsConfig too"}},
		{"a digest that is not one", set("image.digest", "latest"), nil, []string{"/image/digest"}},
		{"a CIDR that is not one", set("webhook.allowedCIDRs", []any{"10.0.0.1"}), nil, []string{"/webhook/allowedCIDRs/0"}},
		{"hostNetwork as a string", set("hostNetwork", "yes"), nil, []string{"/hostNetwork"}},
	}
	for name, helm := range helms(t) {
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				_, err := helmtemplate.Render(helmtemplate.Options{Helm: helm, Chart: chartDir, Values: tt.values, APIVersions: tt.apis})
				if err == nil {
					t.Fatal("rendered")
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q: %v", w, err)
					}
				}
			})
		}
	}
}

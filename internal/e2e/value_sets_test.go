//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	widgetchart "github.com/widgetry/widget-operator/internal/chart"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// corpCA is a CA ClusterIssuer standing in for a company's own (the minimal value set's
// certManager.issuerRef): a self-signed root in cert-manager's cluster resource namespace.
const corpCA = `apiVersion: v1
kind: Namespace
metadata:
  name: cert-manager
---
apiVersion: v1
kind: Namespace
metadata:
  name: monitoring
---
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata:
  name: corp-root
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: corp-ca
  namespace: cert-manager
spec:
  isCA: true
  commonName: corp-ca
  secretName: corp-ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: corp-root, kind: ClusterIssuer, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata:
  name: corp-ca
spec:
  ca:
    secretName: corp-ca
`

// applyCorpCA creates (or keeps) corpCA and waits until its ClusterIssuer is ready.
func applyCorpCA(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	manifest := filepath.Join(t.TempDir(), "corp-ca.yaml")
	if err := os.WriteFile(manifest, []byte(corpCA), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Kubectl(t, "apply", "-f", manifest)
	c.Kubectl(t, "wait", "--for=condition=Ready", "--timeout=2m", "clusterissuer/corp-ca")
}

// TestChartValueSets is chart-testing's install on real nodes, three in three zones, with
// Helm 4: every value set in charts/widget-operator/ci is installed in a namespace of its own
// (Pod Security restricted, privileged only for hostNetwork) with --wait and its hooks,
// checked for what the set changes on the live objects and for its replicas spread (each
// plane's replicas on as many nodes and zones as there are replicas), smoke-tested with helm
// test (a Widget written through the webhooks and read back), and uninstalled: nothing the
// release created is left but the CRD (helm.sh/resource-policy: keep), which the test deletes
// before the next set.
func TestChartValueSets(t *testing.T) {
	c := cluster.StartNodes(t, valueSetNodes)
	c.ImportOperatorImage(t)
	c.StartCertManager(t)
	c.Kubectl(t, "apply", "--server-side", "-f", filepath.Join(c.Bin, "prometheus-operator-crds"))
	applyCorpCA(t, c)

	chart := filepath.Join(prereq.RepoRoot(t), widgetchart.Dir)
	files, err := filepath.Glob(filepath.Join(chart, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*-values.yaml: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), "-values.yaml")
		if !t.Run(name, func(t *testing.T) { installValueSet(t, c, chart, f, name) }) {
			return
		}
	}
}

// valueSetNodes is how many nodes the value sets are installed on: enough for two replicas
// of each plane apart, with one node to spare for a rollout's extra replica.
const valueSetNodes = 3

// valueSetArgs are what the test adds to a value set's file. hostnetwork: the file asks for
// one replica, what any cluster can run (each node runs at most one, the ports being the
// node's); on several nodes two must run on two. Its rollout (valueSetChecks) is about the
// order the replicas go in, not how long each drains: a short drain keeps it to seconds.
var valueSetArgs = map[string][]string{"hostnetwork": {"--set", "replicaCount=2",
	"--set", "manager.drainDelay=2s", "--set", "manager.connectionDrainTimeout=3s"}}

// checkSpread fails the test unless each plane's replicas run on as many nodes, and in as many
// zones, as there are replicas (up to the cluster's): what the chart's default
// podAntiAffinity and zoneSpread (or a set's own affinity and topologySpreadConstraints) ask
// of the scheduler on empty nodes.
func checkSpread(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	zoneOf := map[string]string{}
	for _, n := range c.Nodes {
		zoneOf[n.IP] = n.Zone
	}
	for _, plane := range []string{"webhook", "controller"} {
		pods := podsIn(t, c, ns, "app.kubernetes.io/component="+plane)
		nodes, zones := map[string]bool{}, map[string]bool{}
		var where []string
		for _, p := range pods {
			nodes[p.Status.HostIP] = true
			zones[zoneOf[p.Status.HostIP]] = true
			where = append(where, p.Metadata.Name+"@"+p.Status.HostIP)
		}
		want := min(len(pods), len(c.Nodes))
		if len(nodes) != want || len(zones) != want {
			t.Errorf("%s plane: %d replicas on %d nodes in %d zones (%v), want %d of each", plane, len(pods), len(nodes), len(zones), where, want)
		}
	}
}

// valueSetChecks are what a value set changes on the live objects, beyond the install
// succeeding (every pod Ready, the webhooks answering), the replicas' spread and helm test
// passing.
var valueSetChecks = map[string]func(t *testing.T, c *cluster.Cluster, ns string){
	"hostnetwork": func(t *testing.T, c *cluster.Cluster, ns string) {
		for _, p := range podsIn(t, c, ns, "app.kubernetes.io/component=controller") {
			if p.Spec.HostNetwork {
				t.Errorf("controller pod %s runs in the host's network: only the webhook plane needs it", p.Metadata.Name)
			}
		}
		webhooks := podsIn(t, c, ns, "app.kubernetes.io/component=webhook")
		for _, p := range webhooks {
			if !p.Spec.HostNetwork || p.Status.PodIP != p.Status.HostIP {
				t.Errorf("pod %s: hostNetwork %t, pod IP %s, host IP %s", p.Metadata.Name, p.Spec.HostNetwork, p.Status.PodIP, p.Status.HostIP)
			}
		}
		if len(webhooks) != 2 {
			t.Errorf("%d webhook replicas with hostNetwork, want 2 (valueSetArgs)", len(webhooks))
		}
		// Two replicas on two schedulable nodes: a rollout has no node to surge onto, and
		// still completes (the chart's maxUnavailable 1 with hostNetwork).
		used := map[string]bool{}
		for _, p := range webhooks {
			used[p.Status.HostIP] = true
		}
		var spare []string
		for _, n := range c.Nodes {
			if !used[n.IP] {
				spare = append(spare, n.Name)
				c.Kubectl(t, "cordon", n.Name)
			}
		}
		defer func() {
			for _, n := range spare {
				c.Kubectl(t, "uncordon", n)
			}
		}()
		c.Kubectl(t, "-n", ns, "rollout", "restart", "deploy/widget-operator-webhook")
		c.Kubectl(t, "-n", ns, "rollout", "status", "deploy/widget-operator-webhook", "--timeout=3m")
		// The webhook Service's endpoint is the node's address on the webhook port.
		eps := c.Kubectl(t, "-n", ns, "get", "endpointslices", "-l", "kubernetes.io/service-name=widget-operator-webhook",
			"-o", "jsonpath={.items[*].ports[*].port} {.items[*].endpoints[*].addresses[*]}")
		if !strings.HasPrefix(eps, "10260 ") {
			t.Errorf("webhook endpoints: %q, want port 10260 on the node's address", eps)
		}
	},
	"priority": func(t *testing.T, c *cluster.Cluster, ns string) {
		for _, p := range podsIn(t, c, ns, planesSelector) {
			if p.Spec.PriorityClassName != "system-cluster-critical" || p.Spec.Priority < 2000000000 {
				t.Errorf("pod %s: priorityClassName %q priority %d", p.Metadata.Name, p.Spec.PriorityClassName, p.Spec.Priority)
			}
		}
		// The chart's quota counts the critical pods (the finished hook pods leave it as the
		// quota controller catches up): it is the one that admits them.
		testenv.Eventually(t, time.Minute, "the critical-pods quota counts the two replicas of each plane", func() error {
			if used := c.Kubectl(t, "-n", ns, "get", "resourcequota", "widget-operator-critical-pods", "-o", "jsonpath={.status.used.pods}/{.status.hard.pods}"); used != "4/12" {
				return fmt.Errorf("used/hard = %s, want 4/12", used)
			}
			return nil
		})
	},
	"openshift": func(t *testing.T, c *cluster.Cluster, ns string) {
		for _, p := range podsIn(t, c, ns, planesSelector) {
			if sc := p.Spec.SecurityContext; sc.RunAsUser != 1000680000 || sc.RunAsGroup != 0 {
				t.Errorf("pod %s runs as %d:%d, want 1000680000 with no group set", p.Metadata.Name, sc.RunAsUser, sc.RunAsGroup)
			}
		}
	},
	"serviceaccount": func(t *testing.T, c *cluster.Cluster, ns string) {
		// Each plane its own account: the webhook plane's by the name given, the controller
		// plane's the release's with -controller.
		for plane, sa := range map[string]string{"webhook": "widget-manager", "controller": "widget-operator-controller"} {
			for _, p := range podsIn(t, c, ns, "app.kubernetes.io/component="+plane) {
				if p.Spec.ServiceAccountName != sa {
					t.Errorf("%s pod %s runs as %s, want %s", plane, p.Metadata.Name, p.Spec.ServiceAccountName, sa)
				}
			}
			if got := c.Kubectl(t, "-n", ns, "get", "serviceaccount", sa, "-o", "jsonpath={.automountServiceAccountToken}"); got != "false" {
				t.Errorf("ServiceAccount %s automountServiceAccountToken = %q", sa, got)
			}
		}
	},
	"customisation": func(t *testing.T, c *cluster.Cluster, ns string) {
		for _, p := range podsIn(t, c, ns, planesSelector) {
			if p.Metadata.Labels["team"] != "platform" || p.Metadata.Annotations["widgetry.io/owner"] != "platform-team" {
				t.Errorf("pod %s lacks the common label or annotation: %v %v", p.Metadata.Name, p.Metadata.Labels, p.Metadata.Annotations)
			}
		}
		// Every object of the release carries the common label.
		all, labelled := releaseObjects(t, c, "app.kubernetes.io/instance=widget-operator"), releaseObjects(t, c, "team=platform")
		if len(all) < 20 || strings.Join(all, " ") != strings.Join(labelled, " ") {
			t.Errorf("objects of the release: %v\nwith the common label: %v", all, labelled)
		}
		env := c.Kubectl(t, "-n", ns, "get", "deploy", "widget-operator-webhook", "-o", "jsonpath={.spec.template.spec.containers[0].env[*].name} {.spec.template.spec.containers[0].volumeMounts[*].mountPath}")
		if !strings.Contains(env, "GODEBUG") || !strings.Contains(env, "/etc/widget-operator/extra") {
			t.Errorf("the manager container lacks the extra env or mount: %s", env)
		}
	},
	"monitoring": func(t *testing.T, c *cluster.Cluster, ns string) {
		c.Kubectl(t, "-n", ns, "get", "servicemonitor", "widget-operator")
		c.Kubectl(t, "-n", "monitoring", "get", "prometheusrule", "widget-operator")
		if n := strings.Fields(c.Kubectl(t, "-n", "monitoring", "get", "configmaps", "-l", "grafana_dashboard=1", "-o", "name")); len(n) != 4 {
			t.Errorf("dashboard ConfigMaps in monitoring: %v, want 4", n)
		}
		// The scrape's token (filled in by the token controller) is authorized to read /metrics.
		testenv.Eventually(t, time.Minute, "the scraper's token Secret is filled in", func() error {
			if c.Kubectl(t, "-n", ns, "get", "secret", "widget-operator-metrics-scraper-token", "-o", "jsonpath={.data.token}") == "" {
				return fmt.Errorf("no token yet")
			}
			return nil
		})
		can := c.Kubectl(t, "auth", "can-i", "get", "/metrics", "--as", "system:serviceaccount:"+ns+":widget-operator-metrics-scraper")
		if strings.TrimSpace(can) != "yes" {
			t.Errorf("the scraper may not get /metrics: %s", can)
		}
	},
}

// installValueSet is one value set's install, checks, helm test and uninstall.
func installValueSet(t *testing.T, c *cluster.Cluster, chart, values, name string) {
	ns := "ci-" + name
	level := "restricted"
	if name == "hostnetwork" {
		level = "privileged"
	}
	c.Kubectl(t, "create", "namespace", ns)
	c.Kubectl(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce="+level)
	helm := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := c.Command(ctx, filepath.Join(c.Bin, "helm4"), append(args, "--namespace", ns)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s\n%s", strings.Join(args, " "), err, out,
				c.Kubectl(t, "-n", ns, "get", "pods,jobs,certificates,events", "-o", "wide"))
		}
		return string(out)
	}
	start := time.Now()
	helm(append([]string{"install", "widget-operator", chart, "--values", values, "--set", "image.tag=dev", "--wait", "--timeout", "5m"},
		valueSetArgs[name]...)...)
	installed := time.Since(start)
	checkSpread(t, c, ns)
	if check := valueSetChecks[name]; check != nil {
		check(t, c, ns)
	}
	helm("test", "widget-operator", "--timeout", "3m")
	helm("uninstall", "widget-operator", "--wait", "--timeout", "3m")
	t.Logf("%s: install --wait %s, in all %s", name, installed.Round(time.Second), time.Since(start).Round(time.Second))

	// Nothing of the release is left but the CRD, and manager pods already being deleted: a
	// draining replica serves until the apiserver has closed its kept-alive connections
	// (up to manager.connectionDrainTimeout), which the next value set need not wait for.
	left := releaseObjects(t, c, "app.kubernetes.io/instance=widget-operator")
	if len(left) != 1 || left[0] != "customresourcedefinition/"+crd.WidgetName {
		t.Errorf("left after helm uninstall: %v, want only the CRD", left)
	}
	c.Kubectl(t, "delete", "customresourcedefinition", crd.WidgetName, "--wait", "--timeout=2m")
	c.Kubectl(t, "delete", "namespace", ns, "--wait=false")
}

// livePod is the part of a pod the value set checks read.
type livePod struct {
	Metadata struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		HostNetwork        bool   `json:"hostNetwork"`
		PriorityClassName  string `json:"priorityClassName"`
		Priority           int32  `json:"priority"`
		ServiceAccountName string `json:"serviceAccountName"`
		SecurityContext    struct {
			RunAsUser  int64 `json:"runAsUser"`
			RunAsGroup int64 `json:"runAsGroup"`
		} `json:"securityContext"`
	} `json:"spec"`
	Status struct {
		PodIP  string `json:"podIP"`
		HostIP string `json:"hostIP"`
	} `json:"status"`
}

// podsIn lists the pods of the planes selector selects in ns (at least one), e.g.
// "app.kubernetes.io/component=webhook" or planesSelector (both).
func podsIn(t *testing.T, c *cluster.Cluster, ns, selector string) []livePod {
	t.Helper()
	var list struct {
		Items []livePod `json:"items"`
	}
	out := c.Kubectl(t, "-n", ns, "get", "pods", "-l", selector, "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) == 0 {
		t.Fatalf("pods %s in %s: %v\n%s", selector, ns, err, out)
	}
	return list.Items
}

// releaseKinds are the kinds of object the chart creates.
const releaseKinds = "deployments,services,configmaps,secrets,serviceaccounts,roles,rolebindings,networkpolicies,resourcequotas," +
	"poddisruptionbudgets,jobs,pods,certificates.cert-manager.io,issuers.cert-manager.io,servicemonitors,prometheusrules," +
	"clusterroles,clusterrolebindings,mutatingwebhookconfigurations,validatingwebhookconfigurations," +
	"validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings,customresourcedefinitions"

// releaseObjects lists the objects of releaseKinds matching a label selector, in every
// namespace, as kind/name, leaving out those being deleted.
func releaseObjects(t *testing.T, c *cluster.Cluster, selector string) []string {
	t.Helper()
	out := c.Kubectl(t, "get", "-A", "-l", selector, "-o", `go-template={{range .items}}{{if not .metadata.deletionTimestamp}}{{.kind}}/{{.metadata.name}} {{end}}{{end}}`, releaseKinds)
	return strings.Fields(strings.ToLower(out))
}

//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/widgetry/widget-operator/internal/reports"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// TestClusterRunsAChart is the proof of the end-to-end tier, on three nodes in three zones:
// the nodes register with their zones and the pod ranges their CNI uses, a chart's pods run
// from an imported image, one per node, a real HTTP readiness probe gates Ready, every pod
// and the Service ClusterIP answer from every node (pod traffic routed between the nodes,
// each node's kube-proxy programming the Service), a pod reaches the apiserver with its
// ServiceAccount token, the apiserver reaches each node's kubelet, and the teardown leaves
// nothing behind. It records what the cluster cost (reports.ClusterCostFile).
func TestClusterRunsAChart(t *testing.T) {
	const nodes = 3
	c := cluster.StartNodes(t, nodes)
	ctx := context.Background()

	// kube-controller-manager --allocate-node-cidrs gave each node a pod range; the first
	// node's is the one its CNI was written with, the others' CNI was written from theirs.
	podCIDRs := map[string]*net.IPNet{}
	for i, n := range c.Nodes {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && node.Spec.PodCIDR != "10.244.0.0/24" {
			t.Errorf("node %s podCIDR = %q, want 10.244.0.0/24", node.Name, node.Spec.PodCIDR)
		}
		_, cidr, err := net.ParseCIDR(node.Spec.PodCIDR)
		if err != nil {
			t.Fatalf("node %s podCIDR %q: %v", node.Name, node.Spec.PodCIDR, err)
		}
		for other, o := range podCIDRs {
			if o.String() == cidr.String() {
				t.Errorf("nodes %s and %s share the pod range %s", other, node.Name, cidr)
			}
		}
		podCIDRs[n.Name] = cidr
		if got := node.Labels[cluster.ZoneLabel]; got != n.Zone {
			t.Errorf("node %s: %s=%q, want %q", node.Name, cluster.ZoneLabel, got, n.Zone)
		}
		var internal string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = a.Address
			}
		}
		if internal != n.IP {
			t.Errorf("node %s InternalIP %q, want %q", node.Name, internal, n.IP)
		}
	}
	if len(c.Nodes) != nodes {
		t.Fatalf("%d nodes, want %d", len(c.Nodes), nodes)
	}

	image := c.ImportSampleServer(t)
	start := time.Now()
	c.Helm(t, "install", "sample", "internal/testenv/cluster/testdata/sample-chart",
		"--namespace", "e2e", "--create-namespace", "--set", "image="+image,
		"--set", fmt.Sprintf("replicas=%d", nodes), "--set", "onePerNode=true",
		"--wait", "--timeout", "2m")
	t.Logf("helm install --wait: %s", time.Since(start).Round(100*time.Millisecond))

	dep, err := c.Client.AppsV1().Deployments("e2e").Get(ctx, "sample", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Status.ReadyReplicas != nodes || dep.Status.AvailableReplicas != nodes {
		t.Fatalf("Deployment e2e/sample: %d ready, %d available replicas, want %d", dep.Status.ReadyReplicas, dep.Status.AvailableReplicas, nodes)
	}

	pods, err := c.Client.CoreV1().Pods("e2e").List(ctx, metav1.ListOptions{LabelSelector: "app=sample"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != nodes {
		t.Fatalf("%d pods, want %d", len(pods.Items), nodes)
	}
	onNode := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		onNode[p.Spec.NodeName] = p
		// The pod's address comes from its own node's range: the CNI of each node is its own.
		if cidr := podCIDRs[p.Spec.NodeName]; cidr == nil || !cidr.Contains(net.ParseIP(p.Status.PodIP)) {
			t.Errorf("pod %s on %s has IP %s, outside its node's pod range %v", p.Name, p.Spec.NodeName, p.Status.PodIP, cidr)
		}
		// The probe really gated Ready: the server answers 503 for its first 2s.
		started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				if cond.Status != corev1.ConditionTrue {
					t.Errorf("pod %s not Ready", p.Name)
				}
				if gap := cond.LastTransitionTime.Sub(started); gap < time.Second {
					t.Errorf("pod %s Ready %s after its container started; the readiness probe should have held it back ~2s", p.Name, gap)
				}
			}
		}
		body := get(t, c.HTTPClient, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/")
		if !strings.Contains(body, p.Name) {
			t.Errorf("pod %s at %s answered %q, want its name", p.Name, p.Status.PodIP, body)
		}

		// In-cluster credentials: the pod asks the apiserver, through the kubernetes
		// Service (its own node's kube-proxy), who its ServiceAccount token is.
		var review struct {
			Status struct {
				UserInfo struct{ Username string } `json:"userInfo"`
			} `json:"status"`
		}
		who := get(t, c.HTTPClient, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/whoami")
		if err := json.Unmarshal([]byte(who), &review); err != nil {
			t.Fatalf("pod %s /whoami: %v: %s", p.Name, err, who)
		}
		if want := "system:serviceaccount:e2e:sample"; review.Status.UserInfo.Username != want {
			t.Errorf("pod %s is %q to the apiserver, want %q", p.Name, review.Status.UserInfo.Username, want)
		}

		// Logs through the apiserver → that node's kubelet.
		if logs := c.Kubectl(t, "logs", "-n", "e2e", p.Name); !strings.Contains(logs, "listening on :8080") {
			t.Errorf("kubectl logs %s (on %s): %q", p.Name, p.Spec.NodeName, logs)
		}
	}
	if len(onNode) != nodes {
		t.Errorf("the %d pods run on %d nodes, want one on each (required anti-affinity)", nodes, len(onNode))
	}

	svc, err := c.Client.CoreV1().Services("e2e").Get(ctx, "sample", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// From every node, as its pods' traffic leaves it: the ClusterIP reaches the pods of
	// every node through that node's kube-proxy (once it has programmed every endpoint, which
	// may lag Ready by its sync period), and a pod on the next node answers at its own IP.
	for i, n := range c.Nodes {
		from := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: n.DialContext, DisableKeepAlives: true}}
		seen := map[string]bool{}
		for deadline := time.Now().Add(20 * time.Second); len(seen) < nodes && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			body := get(t, from, "http://"+net.JoinHostPort(svc.Spec.ClusterIP, "80")+"/")
			for _, p := range pods.Items {
				if strings.Contains(body, p.Name) {
					seen[p.Name] = true
				}
			}
		}
		if len(seen) != nodes {
			t.Errorf("from node %s, the Service ClusterIP %s reached pods %v, want all %d", n.Name, svc.Spec.ClusterIP, seen, nodes)
		}
		next := onNode[c.Nodes[(i+1)%len(c.Nodes)].Name]
		if body := get(t, from, "http://"+net.JoinHostPort(next.Status.PodIP, "8080")+"/"); !strings.Contains(body, next.Name) {
			t.Errorf("from node %s, pod %s at %s answered %q", n.Name, next.Name, next.Status.PodIP, body)
		}
	}

	recordCost(t, c)
	c.Stop(t)
}

// recordCost writes what the running cluster costs: the time it took to come up and the
// resident memory of the control plane and of each node's own processes.
func recordCost(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	const mib = 1 << 20
	cp, err := c.ResidentBytes(nil, cluster.ControlPlane...)
	if err != nil {
		t.Fatal(err)
	}
	report := reports.ClusterCost{
		Date:            time.Now().UTC().Format(time.RFC3339),
		Machine:         fmt.Sprintf("%d cores, %s/%s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH),
		UpSeconds:       c.UpTook.Seconds(),
		ControlPlaneMiB: float64(cp) / mib,
	}
	for i := range c.Nodes {
		rss, err := c.ResidentBytes(&c.Nodes[i], cluster.NodeProcesses...)
		if err != nil {
			t.Fatal(err)
		}
		report.Nodes = append(report.Nodes, reports.NodeCost{Name: c.Nodes[i].Name, MiB: float64(rss) / mib})
	}
	dir := reports.Dir(c.Root)
	if err := reports.WriteClusterCost(dir, report); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (make reports publishes %s)", strings.TrimSpace(report.Text()), filepath.Join(dir, reports.ClusterCostFile))
}

// get fetches url with client (from inside a network namespace of the cluster), retrying
// briefly.
func get(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 15*time.Second, true,
		func(ctx context.Context) (bool, error) {
			resp, err := client.Get(url)
			if err != nil {
				t.Logf("GET %s: %v", url, err)
				return false, nil
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Logf("GET %s: %s: %s", url, resp.Status, b)
				return false, nil
			}
			body = string(b)
			return true, nil
		})
	if err != nil {
		t.Fatalf("GET %s: %v", url, fmt.Errorf("no 200 within 15s: %w", err))
	}
	return body
}

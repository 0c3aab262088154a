//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// TestClusterRunsAChart is the proof of the end-to-end tier: a real node runs a chart's
// pods from an imported image, a real HTTP readiness probe gates Ready, pods and the
// Service ClusterIP answer, a pod reaches the apiserver with its ServiceAccount token, and
// the teardown leaves nothing behind.
func TestClusterRunsAChart(t *testing.T) {
	c := cluster.Start(t)
	ctx := context.Background()

	// kube-controller-manager --allocate-node-cidrs gave the node the CNI's pod range.
	node, err := c.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.PodCIDR != "10.244.0.0/24" {
		t.Errorf("node %s podCIDR = %q, want 10.244.0.0/24", node.Name, node.Spec.PodCIDR)
	}

	image := c.ImportSampleServer(t)
	start := time.Now()
	c.Helm(t, "install", "sample", "internal/testenv/cluster/testdata/sample-chart",
		"--namespace", "e2e", "--create-namespace", "--set", "image="+image,
		"--wait", "--timeout", "2m")
	t.Logf("helm install --wait: %s", time.Since(start).Round(100*time.Millisecond))

	dep, err := c.Client.AppsV1().Deployments("e2e").Get(ctx, "sample", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Status.ReadyReplicas != 2 || dep.Status.AvailableReplicas != 2 {
		t.Fatalf("Deployment e2e/sample: %d ready, %d available replicas, want 2", dep.Status.ReadyReplicas, dep.Status.AvailableReplicas)
	}

	pods, err := c.Client.CoreV1().Pods("e2e").List(ctx, metav1.ListOptions{LabelSelector: "app=sample"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("%d pods, want 2", len(pods.Items))
	}
	for _, p := range pods.Items {
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
		body := get(t, c, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/")
		if !strings.Contains(body, p.Name) {
			t.Errorf("pod %s at %s answered %q, want its name", p.Name, p.Status.PodIP, body)
		}

		// In-cluster credentials: the pod asks the apiserver, through the kubernetes
		// Service, who its ServiceAccount token is.
		var review struct {
			Status struct {
				UserInfo struct{ Username string } `json:"userInfo"`
			} `json:"status"`
		}
		who := get(t, c, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/whoami")
		if err := json.Unmarshal([]byte(who), &review); err != nil {
			t.Fatalf("pod %s /whoami: %v: %s", p.Name, err, who)
		}
		if want := "system:serviceaccount:e2e:sample"; review.Status.UserInfo.Username != want {
			t.Errorf("pod %s is %q to the apiserver, want %q", p.Name, review.Status.UserInfo.Username, want)
		}
	}

	svc, err := c.Client.CoreV1().Services("e2e").Get(ctx, "sample", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy's iptables rules balance the ClusterIP over both pods (once it has
	// programmed the second endpoint, which may lag Ready by its sync period).
	seen := map[string]bool{}
	for deadline := time.Now().Add(15 * time.Second); len(seen) < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		body := get(t, c, "http://"+net.JoinHostPort(svc.Spec.ClusterIP, "80")+"/")
		for _, p := range pods.Items {
			if strings.Contains(body, p.Name) {
				seen[p.Name] = true
			}
		}
	}
	if len(seen) != 2 {
		t.Errorf("the Service ClusterIP %s reached pods %v, want both", svc.Spec.ClusterIP, seen)
	}

	// Logs through the apiserver → kubelet path.
	if logs := c.Kubectl(t, "logs", "-n", "e2e", pods.Items[0].Name); !strings.Contains(logs, "listening on :8080") {
		t.Errorf("kubectl logs: %q", logs)
	}

	c.Stop(t)
}

// get fetches url from inside the cluster's network namespace, retrying briefly.
func get(t *testing.T, c *cluster.Cluster, url string) string {
	t.Helper()
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 15*time.Second, true,
		func(ctx context.Context) (bool, error) {
			resp, err := c.HTTPClient.Get(url)
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

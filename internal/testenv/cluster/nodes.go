package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/memprobe"
)

// Node is one node of a cluster: its name, address and zone, and the network namespace its
// kubelet, containerd, kube-proxy and pods run in.
type Node struct {
	Name, IP, Zone, NetNS string
	// suffix ends the names of the node's process records in Dir/pids and its logs in
	// Dir/logs (kubelet-node2.log); none for the first node.
	suffix string
	// number is the node's K in scripts/local-cluster.sh (1 for the first).
	number int
}

// nodesOf names the nodes scripts/local-cluster.sh starts for CLUSTER_NODES=n with its
// default zones (node_name, node_ip, node_ns, node_zone there).
func nodesOf(n int) []Node {
	zones := []string{"zone-a", "zone-b", "zone-c"}
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{Name: NodeName, IP: NodeIP, Zone: zones[i%len(zones)], NetNS: "/run/netns/" + Name, number: i + 1}
		if i > 0 {
			nodes[i].Name = fmt.Sprintf("%s-%d", NodeName, i+1)
			nodes[i].IP = fmt.Sprintf("10.200.0.%d", i+2)
			nodes[i].NetNS = fmt.Sprintf("/run/netns/%s-node%d", Name, i+1)
			nodes[i].suffix = fmt.Sprintf("-node%d", i+1)
		}
	}
	return nodes
}

// ControlPlane names the control plane's processes.
var ControlPlane = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// NodeProcesses names a node's own processes (its pods aside).
var NodeProcesses = []string{"containerd", "kubelet", "kube-proxy"}

// ProcessPID is the PID of one of the cluster's processes, as scripts/local-cluster.sh
// recorded it: a control-plane process by its name, a node's by its name on that node
// (node nil for the control plane).
func (c *Cluster) ProcessPID(node *Node, name string) (int, error) {
	if node != nil {
		name += node.suffix
	}
	b, err := os.ReadFile(filepath.Join(c.Dir, "pids", name+".pid"))
	if err != nil {
		return 0, fmt.Errorf("the PID of %s: %w", name, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// ResidentBytes is the resident memory (VmRSS) of the named processes together (see
// ProcessPID).
func (c *Cluster) ResidentBytes(node *Node, names ...string) (uint64, error) {
	var total uint64
	for _, name := range names {
		pid, err := c.ProcessPID(node, name)
		if err != nil {
			return 0, err
		}
		rss, err := memprobe.RSS(pid)
		if err != nil {
			return 0, fmt.Errorf("%s (PID %d): %w", name, pid, err)
		}
		total += rss
	}
	return total, nil
}

// Node is the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for i := range c.Nodes {
		if c.Nodes[i].Name == name {
			return &c.Nodes[i]
		}
	}
	return nil
}

// StopNode stops node dead, as a kernel panic or a cut cable would (local-cluster.sh
// node-stop): every packet to or from it is dropped, so connections to it hang rather than
// fail; its kubelet, containerd and kube-proxy stop and its pods freeze. Nothing graceful
// happens: the control plane notices only when the node's heartbeats stop. The first node
// holds the control plane and cannot be stopped. The node goes on at StartNode or, if the
// test ends first, at the cluster's teardown.
func (c *Cluster) StopNode(tb testing.TB, node *Node) {
	tb.Helper()
	if out, err := c.script(context.Background(), "node-stop", strconv.Itoa(node.number)); err != nil {
		tb.Fatalf("cluster: stopping node %s: %v\n%s", node.Name, err, out)
	}
}

// StartNode lets a node stopped by StopNode go on where it stopped.
func (c *Cluster) StartNode(tb testing.TB, node *Node) {
	tb.Helper()
	if out, err := c.script(context.Background(), "node-start", strconv.Itoa(node.number)); err != nil {
		tb.Fatalf("cluster: starting node %s again: %v\n%s", node.Name, err, out)
	}
}

package reports

import (
	"fmt"
	"strings"
)

// ClusterCostFile is what the end-to-end tier's multi-node test measured of the local
// cluster (scripts/local-cluster.sh with CLUSTER_NODES).
const ClusterCostFile = "local-cluster.json"

// ClusterCost is the time a multi-node local cluster took to come up and the memory its
// processes held once it had run a chart.
type ClusterCost struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	// UpSeconds is `scripts/local-cluster.sh up` until every node was Ready.
	UpSeconds float64 `json:"upSeconds"`
	// ControlPlaneMiB is the resident memory of etcd, kube-apiserver,
	// kube-controller-manager and kube-scheduler together.
	ControlPlaneMiB float64 `json:"controlPlaneMiB"`
	// Nodes are the nodes in order, the first (with the control plane) first.
	Nodes []NodeCost `json:"nodes"`
}

// NodeCost is one node's own processes: its containerd, kubelet and kube-proxy (not its pods).
type NodeCost struct {
	Name string  `json:"name"`
	MiB  float64 `json:"mib"`
}

// WriteClusterCost writes c as JSON to dir.
func WriteClusterCost(dir string, c ClusterCost) error {
	return writeJSON(dir, ClusterCostFile, c)
}

// ReadClusterCost reads a report WriteClusterCost wrote, refusing one that no run of several
// nodes could have written.
func ReadClusterCost(path string) (ClusterCost, error) {
	c, err := readJSON[ClusterCost](path)
	if err != nil {
		return c, err
	}
	if len(c.Nodes) < 2 {
		return c, fmt.Errorf("%s: %d nodes, want 2 or more", path, len(c.Nodes))
	}
	if c.UpSeconds <= 0 || c.ControlPlaneMiB <= 0 {
		return c, fmt.Errorf("%s: up %gs, control plane %g MiB: want both above zero", path, c.UpSeconds, c.ControlPlaneMiB)
	}
	for _, n := range c.Nodes {
		if n.MiB <= 0 {
			return c, fmt.Errorf("%s: node %q holds %g MiB: want above zero", path, n.Name, n.MiB)
		}
	}
	return c, nil
}

// Text renders the cost as a sentence: the time to come up, the control plane's memory and
// each node's.
func (c ClusterCost) Text() string {
	var nodes []string
	var total float64
	for _, n := range c.Nodes {
		nodes = append(nodes, fmt.Sprintf("%s %.0f MiB", n.Name, n.MiB))
		total += n.MiB
	}
	return fmt.Sprintf("A cluster of **%d nodes** came up in **%.0f s**; once it ran a chart, the control plane held %.0f MiB "+
		"and the containerd, kubelet and kube-proxy of each node: %s (%.0f MiB together, pods not counted; %s, %s).\n",
		len(c.Nodes), c.UpSeconds, c.ControlPlaneMiB, strings.Join(nodes, ", "), total, c.Machine, c.Date)
}

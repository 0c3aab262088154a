package metrics

import "github.com/prometheus/client_golang/prometheus"

// PlacementInfoName is the placement metric's name.
const PlacementInfoName = "widget_replica_placement_info"

// Placement is where a replica runs: its node, and the node's topology.kubernetes.io/zone
// label ("" when the node has none or the cluster does not copy it onto pods).
type Placement struct {
	Node, Zone string
}

// NewPlacementCollector returns widget_replica_placement_info{node,zone} 1. The replicas' series
// together tell whether they share one node or one zone, which no series of their own would:
// an instance label is the pod's address, not where the pod runs.
func NewPlacementCollector(p Placement) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        PlacementInfoName,
		Help:        "Where this widget-manager replica runs: its node and the node's zone (topology.kubernetes.io/zone, empty when unknown), value 1.",
		ConstLabels: prometheus.Labels{"node": p.Node, "zone": p.Zone},
	})
	g.Set(1)
	return g
}

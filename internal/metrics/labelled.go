package metrics

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// Labelled gathers g with label=value added to every series: the controller plane's endpoint
// labels its series process="controller", as the single-Deployment layout's re-export did
// (RemoteCollector), so that the alerts and dashboards tell the two planes apart by series and
// not by scrape target.
func Labelled(g prometheus.Gatherer, label, value string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		families, err := g.Gather()
		out := make([]*dto.MetricFamily, 0, len(families))
		for _, mf := range families {
			labelled := &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Unit: mf.Unit}
			for _, m := range mf.GetMetric() {
				if m = withLabel(m, label, value); m != nil {
					labelled.Metric = append(labelled.Metric, m)
				}
			}
			if len(labelled.Metric) > 0 {
				out = append(out, labelled)
			}
		}
		return out, err
	})
}

// withLabel is a copy of m with label=value added, or nil when m already has label (a series
// that names its process itself is not ours to relabel, and dropping it keeps the exposition
// free of duplicates).
func withLabel(m *dto.Metric, label, value string) *dto.Metric {
	if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label }) {
		return nil
	}
	m = proto.Clone(m).(*dto.Metric)
	m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(label), Value: proto.String(value)})
	slices.SortFunc(m.Label, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return m
}

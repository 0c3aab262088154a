package testenv

import (
	"bytes"
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/discovery"
)

// APIServerMetrics scrapes the apiserver's /metrics as the Env's admin and returns the
// families by name.
func (e *Env) APIServerMetrics(tb testing.TB) map[string]*dto.MetricFamily {
	tb.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		tb.Fatal(err)
	}
	body, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		tb.Fatalf("testenv: read the apiserver's /metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		tb.Fatalf("testenv: parse the apiserver's metrics: %v", err)
	}
	return families
}

// Label returns the value of m's label name, or "".
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Writes counts the writes the apiserver received (its apiserver_request_total: every write
// verb, whatever its answer), by resource, or resource/subresource for a subresource
// ("widgets/status").
func (e *Env) Writes(tb testing.TB) map[string]int {
	tb.Helper()
	writes := map[string]int{}
	for _, m := range e.APIServerMetrics(tb)["apiserver_request_total"].GetMetric() {
		switch Label(m, "verb") {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE": // as the apiserver names the write verbs
		default:
			continue
		}
		key := Label(m, "resource")
		if sub := Label(m, "subresource"); sub != "" {
			key += "/" + sub
		}
		writes[key] += int(m.GetCounter().GetValue())
	}
	return writes
}

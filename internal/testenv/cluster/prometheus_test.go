//go:build e2e

package cluster_test

import (
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// TestPrometheusScrapesPods: Debian's Prometheus finds the sample chart's pods through
// kubernetes_sd_configs (their prometheus.io annotations) and scrapes their /metrics.
func TestPrometheusScrapesPods(t *testing.T) {
	c := cluster.Start(t)
	image := c.ImportSampleServer(t)
	c.Helm(t, "install", "metrics", "internal/testenv/cluster/testdata/sample-chart",
		"--namespace", "mon", "--create-namespace", "--set", "image="+image, "--set", "readyAfter=0s",
		"--wait", "--timeout", "2m")
	p := c.StartPrometheus(t)

	start := time.Now()
	up := p.WaitFor(t, `up{job="pods",namespace="mon"} == 1`, 2, 60*time.Second)
	t.Logf("both pods discovered and scraped in %s", time.Since(start).Round(100*time.Millisecond))
	for _, s := range up {
		if s.Metric["pod"] == "" {
			t.Errorf("target without a pod label: %v", s.Metric)
		}
	}
	ready := p.WaitFor(t, `sample_server_ready{namespace="mon"} == 1`, 2, 30*time.Second)
	if len(ready) != 2 {
		t.Errorf("sample_server_ready: %v, want one sample per pod", ready)
	}
	p.WaitFor(t, `sample_server_requests_total{namespace="mon",path="/metrics"} > 0`, 2, 30*time.Second)
}

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrometheusAddr is where Prometheus listens, inside the cluster's network namespace.
const PrometheusAddr = "127.0.0.1:9090"

// Prometheus is a Prometheus server running next to the cluster.
type Prometheus struct {
	// URL is its base URL, reachable through the Cluster's HTTPClient.
	URL string
	c   *Cluster
}

// podScrapeConfig scrapes every pod annotated prometheus.io/scrape: "true" on the port in
// prometheus.io/port (path prometheus.io/path, default /metrics), found through the
// cluster's kubeconfig.
const podScrapeConfig = `
- job_name: pods
  kubernetes_sd_configs:
  - role: pod
    kubeconfig_file: %[1]s
  relabel_configs:
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
    action: keep
    regex: "true"
  - source_labels: [__meta_kubernetes_pod_phase]
    action: drop
    regex: Pending|Succeeded|Failed
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
    action: replace
    regex: (.+)
    target_label: __metrics_path__
  - source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
    action: replace
    regex: ([^:]+)(?::\d+)?;(\d+)
    replacement: $1:$2
    target_label: __address__
  - source_labels: [__meta_kubernetes_namespace]
    target_label: namespace
  - source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
`

// StartPrometheus starts bin/prometheus inside the cluster's network namespace,
// scraping every 2 s the pods found through kubernetes_sd_configs (see podScrapeConfig) and
// any extra scrape_configs entries given as YAML list items. It stops before the cluster
// goes down and logs to Dir/logs/prometheus.log. On a cluster where it already runs it
// returns that one (the extra scrape configs of the first call stay).
func (c *Cluster) StartPrometheus(tb testing.TB, extraScrapeConfigs ...string) *Prometheus {
	tb.Helper()
	if p, ok := c.startedNextTo("prometheus"); ok {
		return p.(*Prometheus)
	}
	// Debian's prometheus package is built without kubernetes_sd_configs, so the toolchain
	// builds Prometheus from its Go module with only that discovery.
	bin := filepath.Join(c.Bin, "prometheus")
	if _, err := os.Stat(bin); err != nil {
		msg := "cluster: " + bin + " missing: run scripts/toolchain.sh prometheus (make tools)"
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	dir := filepath.Join(c.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cfg := "global: {scrape_interval: 2s, scrape_timeout: 1s, evaluation_interval: 2s}\nscrape_configs:" +
		fmt.Sprintf(podScrapeConfig, c.Kubeconfig) + strings.Join(extraScrapeConfigs, "\n")
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	exited := c.startNextTo(tb, "prometheus", bin,
		"--config.file="+cfgFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+PrometheusAddr,
		"--web.enable-lifecycle",
	)
	p := &Prometheus{URL: "http://" + PrometheusAddr, c: c}
	c.waitHTTP(tb, "prometheus", p.URL+"/-/ready", 60*time.Second, exited)
	c.markStarted("prometheus", p)
	tb.Logf("cluster: prometheus ready in %s", time.Since(start).Round(100*time.Millisecond))
	return p
}

// Sample is one element of an instant query's result vector.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query runs an instant PromQL query and returns its vector.
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.c.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: %s: %w", expr, body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: a %s, not a vector", expr, r.Data.ResultType)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", expr, s.Value[1], err)
		}
		out = append(out, Sample{Metric: s.Metric, Value: v})
	}
	return out, nil
}

// WaitFor polls expr until it returns at least n samples, and returns them; it fails the
// test after timeout.
func (p *Prometheus) WaitFor(tb testing.TB, expr string, n int, timeout time.Duration) []Sample {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last []Sample
	var lastErr error
	for {
		last, lastErr = p.Query(ctx, expr)
		if lastErr == nil && len(last) >= n {
			return last
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("prometheus: %q gave %d samples (want ≥ %d) within %s; last error: %v; targets: %s",
				expr, len(last), n, timeout, lastErr, p.targets())
			return nil
		case <-time.After(time.Second):
		}
	}
}

// targets summarises the active targets' health, for failure messages.
func (p *Prometheus) targets() string {
	resp, err := p.c.HTTPClient.Get(p.URL + "/api/v1/targets?state=active")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return string(b)
}

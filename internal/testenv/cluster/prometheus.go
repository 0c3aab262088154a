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

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// PrometheusAddr is where Prometheus listens, inside the cluster's network namespace.
const PrometheusAddr = "127.0.0.1:9090"

// Prometheus is a Prometheus server running next to the cluster.
type Prometheus struct {
	// URL is its base URL, reachable through the Cluster's HTTPClient.
	URL string
	c   *Cluster
}

// StartPrometheus starts bin/prometheus next to the cluster (scripts/local-cluster.sh
// prometheus), scraping every 5 s (timeout 5 s) the pods annotated prometheus.io/scrape: "true" (port
// prometheus.io/port, path prometheus.io/path) found through kubernetes_sd_configs with the
// cluster's kubeconfig, and any extra scrape_configs entries given as YAML list items. It goes
// down with the cluster and logs to Dir/logs/prometheus.log. On a cluster where it already
// runs it returns that one (the extra scrape configs of the first call stay).
//
// Debian's prometheus package is built without kubernetes_sd_configs, so the toolchain
// builds Prometheus from its Go module with only that discovery.
func (c *Cluster) StartPrometheus(tb testing.TB, extraScrapeConfigs ...string) *Prometheus {
	tb.Helper()
	if p, ok := c.startedNextTo("prometheus"); ok {
		return p.(*Prometheus)
	}
	if _, err := os.Stat(filepath.Join(c.Bin, "prometheus")); err != nil {
		prereq.Missing(tb, filepath.Join(c.Bin, "prometheus"), "make tools (or scripts/toolchain.sh prometheus)")
	}
	args := []string{"prometheus"}
	if len(extraScrapeConfigs) > 0 {
		extra := filepath.Join(tb.TempDir(), "extra-scrape-configs.yml")
		if err := os.WriteFile(extra, []byte(strings.Join(extraScrapeConfigs, "\n")+"\n"), 0o644); err != nil {
			tb.Fatal(err)
		}
		args = append(args, extra)
	}
	start := time.Now()
	if out, err := c.script(context.Background(), args...); err != nil {
		tb.Fatalf("cluster: scripts/local-cluster.sh prometheus: %v\n%s\n(log: %s)", err, out,
			filepath.Join(c.Dir, "logs", "prometheus.log"))
	}
	p := &Prometheus{URL: "http://" + PrometheusAddr, c: c}
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
			tb.Fatalf("prometheus: %q gave %d samples (want ≥ %d) within %s; last error: %v; the targets' last scrapes: %s",
				expr, len(last), n, timeout, lastErr, p.targets())
			return nil
		case <-time.After(time.Second):
		}
	}
}

// targets summarises each active target's last scrape (job, instance, health, how long it
// took, its error), for failure messages: what was measured, not a guess.
func (p *Prometheus) targets() string {
	resp, err := p.c.HTTPClient.Get(p.URL + "/api/v1/targets?state=active")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			ActiveTargets []struct {
				Labels             map[string]string
				Health             string
				LastError          string
				LastScrapeDuration float64
				ScrapeTimeout      string
			}
		}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&r); err != nil {
		return "targets: " + err.Error()
	}
	var lines []string
	for _, tg := range r.Data.ActiveTargets {
		line := fmt.Sprintf("%s %s(%s): %s in %.2fs (timeout %s)", tg.Labels["job"], tg.Labels["instance"], tg.Labels["pod"], tg.Health, tg.LastScrapeDuration, tg.ScrapeTimeout)
		if tg.LastError != "" {
			line += ": " + tg.LastError
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return "no active target (service discovery found nothing)"
	}
	return strings.Join(lines, "; ")
}

// WaitForNone polls expr until it returns no sample; it fails the test after timeout.
func (p *Prometheus) WaitForNone(tb testing.TB, expr string, timeout time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		last, err := p.Query(ctx, expr)
		if err == nil && len(last) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("prometheus: %q still gave %d samples after %s (last error: %v): %v", expr, len(last), timeout, err, last)
			return
		case <-time.After(time.Second):
		}
	}
}

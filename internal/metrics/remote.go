package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// RemoteCollector re-exports, at every scrape, the metrics another process of the pod serves
// in the text format over a Unix socket, each series with an extra label (process=controller):
// the controller runs in a container of its own, so that killing it leaves the webhooks
// serving, and its metrics reach Prometheus through the one authenticated endpoint the pod
// already has. When the other process does not answer (restarting), its series are absent
// for that scrape.
type RemoteCollector struct {
	client       *http.Client
	label, value string
	log          logr.Logger
}

var _ prometheus.Collector = (*RemoteCollector)(nil)

// NewRemoteCollector reads http://unix/metrics on socket and adds label=value to every series.
func NewRemoteCollector(socket, label, value string, log logr.Logger) *RemoteCollector {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}
	return &RemoteCollector{client: &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: dial}},
		label: label, value: value, log: log}
}

// Describe sends nothing: the remote series are not known in advance (an unchecked collector).
func (c *RemoteCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *RemoteCollector) Collect(ch chan<- prometheus.Metric) {
	families, err := c.fetch()
	if err != nil {
		c.log.V(1).Info("the other process's metrics are not available for this scrape", "error", err.Error())
		return
	}
	for _, mf := range families {
		desc := prometheus.NewDesc(mf.GetName(), mf.GetHelp(), nil, nil)
		for _, m := range mf.GetMetric() {
			if m = withLabel(m, c.label, c.value); m != nil {
				ch <- remoteMetric{desc: desc, m: m}
			}
		}
	}
}

func (c *RemoteCollector) fetch() (map[string]*dto.MetricFamily, error) {
	resp, err := c.client.Get("http://unix/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// remoteMetric is one re-exported series.
type remoteMetric struct {
	desc *prometheus.Desc
	m    *dto.Metric
}

func (r remoteMetric) Desc() *prometheus.Desc { return r.desc }

func (r remoteMetric) Write(out *dto.Metric) error {
	proto.Merge(out, r.m)
	return nil
}

package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	certificateValidDesc = prometheus.NewDesc("widget_webhook_certificate_valid",
		"1 when the serving certificate presented now is within its validity period, 0 when it has expired or is not valid yet. Absent until a certificate is loaded.", nil, nil)
	certificateTrustedDesc = prometheus.NewDesc("widget_webhook_certificate_trusted",
		"1 when the caBundle of source (the CRD's conversion webhook, an admission webhook configuration) verifies the serving certificate presented now for the name the apiserver dials, 0 when it does not (the apiserver's calls to this replica fail their TLS handshake). Absent while the bundles cannot be read.",
		[]string{"source"}, nil)
	certificateHeldDesc = prometheus.NewDesc("widget_webhook_certificate_renewal_held",
		"1 while a renewed serving certificate on disk is held back because a caBundle the apiserver verifies with does not trust it yet (its CA is new); the replica serves its current certificate meanwhile. Absent until a certificate is loaded.", nil, nil)
)

// NewCABundleGauge is widget_webhook_ca_bundle_certificates, set by the elected leader each
// time it plans the CA bundle Secret (internal/cabundle).
func NewCABundleGauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "widget_webhook_ca_bundle_certificates",
		Help: "CA certificates in the bundle Secret cainjector injects into the caBundles, as last planned by this replica while it led (0 if it has not led): 1 normally, 2 while a CA rotation overlaps. Absent without the overlap (certManager.caBundleOverlap=false)."})
}

// CertificateStatus is the judgement of the serving certificate presented now: whether one is
// loaded, whether it is within its validity, and, by source, whether the caBundle there
// trusts it (nil when the bundles cannot be read).
type CertificateStatus struct {
	Loaded, Valid bool
	// Held: a renewed certificate waits for the bundles to trust it.
	Held    bool
	Trusted map[string]bool
}

// CertificateTrustCollector exports widget_webhook_certificate_valid,
// widget_webhook_certificate_trusted and widget_webhook_certificate_renewal_held from a judgement made at scrape time (the manager's
// readiness check makes the same one).
type CertificateTrustCollector struct {
	status func(context.Context) CertificateStatus
}

var _ prometheus.Collector = (*CertificateTrustCollector)(nil)

// NewCertificateTrustCollector returns a collector calling status at every scrape.
func NewCertificateTrustCollector(status func(context.Context) CertificateStatus) *CertificateTrustCollector {
	return &CertificateTrustCollector{status: status}
}

// Describe implements prometheus.Collector.
func (c *CertificateTrustCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- certificateValidDesc
	ch <- certificateTrustedDesc
	ch <- certificateHeldDesc
}

// Collect implements prometheus.Collector.
func (c *CertificateTrustCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := c.status(ctx)
	if !s.Loaded {
		return
	}
	ch <- prometheus.MustNewConstMetric(certificateValidDesc, prometheus.GaugeValue, gauge(s.Valid))
	ch <- prometheus.MustNewConstMetric(certificateHeldDesc, prometheus.GaugeValue, gauge(s.Held))
	for source, ok := range s.Trusted {
		ch <- prometheus.MustNewConstMetric(certificateTrustedDesc, prometheus.GaugeValue, gauge(ok), source)
	}
}

func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

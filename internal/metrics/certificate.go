package metrics

import (
	"crypto/tls"
	"crypto/x509"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the certificate collector's metrics.
const (
	CertificateExpiryName    = "widget_webhook_certificate_expiry_timestamp_seconds"
	CertificateNotBeforeName = "widget_webhook_certificate_not_before_timestamp_seconds"
)

var (
	certificateExpiryDesc = prometheus.NewDesc(CertificateExpiryName,
		"NotAfter of the serving certificate the webhook server currently presents, as a Unix timestamp. Absent until a certificate is loaded.",
		nil, nil)
	// The lifetime (NotAfter - NotBefore) lets an expiry alert be relative to it: a fixed
	// threshold fires forever for certificates shorter than it.
	certificateNotBeforeDesc = prometheus.NewDesc(CertificateNotBeforeName,
		"NotBefore of the serving certificate the webhook server currently presents, as a Unix timestamp. Absent until a certificate is loaded.",
		nil, nil)
)

// CertificateExpiryCollector exports the validity period of the currently loaded serving
// certificate. Reading it at scrape time follows a rotation (certwatcher reloads the file)
// without a restart.
type CertificateExpiryCollector struct {
	expiry func() (notAfter time.Time, loaded bool)
	// current, when set, also gives NotBefore.
	current func() *x509.Certificate
}

var _ prometheus.Collector = (*CertificateExpiryCollector)(nil)

// NewCertificateExpiryCollector returns a collector calling current at every scrape; current
// returns nil while no certificate is loaded.
func NewCertificateExpiryCollector(current func() *x509.Certificate) *CertificateExpiryCollector {
	return &CertificateExpiryCollector{current: current}
}

// NewCertificateExpiryCollectorFunc is NewCertificateExpiryCollector for callers that keep only
// the expiry: expiry returns the certificate's NotAfter and whether one is loaded. It exports
// no NotBefore.
func NewCertificateExpiryCollectorFunc(expiry func() (notAfter time.Time, loaded bool)) *CertificateExpiryCollector {
	return &CertificateExpiryCollector{expiry: expiry}
}

// Describe implements prometheus.Collector.
func (c *CertificateExpiryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- certificateExpiryDesc
	if c.current != nil {
		ch <- certificateNotBeforeDesc
	}
}

// Collect implements prometheus.Collector.
func (c *CertificateExpiryCollector) Collect(ch chan<- prometheus.Metric) {
	if c.current != nil {
		// One read for both, so that they describe the same certificate.
		cert := c.current()
		if cert == nil {
			return
		}
		ch <- prometheus.MustNewConstMetric(certificateExpiryDesc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()))
		ch <- prometheus.MustNewConstMetric(certificateNotBeforeDesc, prometheus.GaugeValue, float64(cert.NotBefore.Unix()))
		return
	}
	notAfter, loaded := c.expiry()
	if !loaded {
		return
	}
	ch <- prometheus.MustNewConstMetric(certificateExpiryDesc, prometheus.GaugeValue,
		float64(notAfter.Unix()))
}

// LeafCertificate adapts a tls.Config-style GetCertificate function (controller-runtime's
// certwatcher.CertWatcher.GetCertificate) to what CertificateExpiryCollector needs: the leaf
// of the chain currently served, or nil when none is loaded or it does not parse.
func LeafCertificate(get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) func() *x509.Certificate {
	return func() *x509.Certificate {
		c, err := get(nil)
		if err != nil || c == nil {
			return nil
		}
		if c.Leaf != nil {
			return c.Leaf
		}
		if len(c.Certificate) == 0 {
			return nil
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			return nil
		}
		return leaf
	}
}

package metrics

import (
	"crypto/tls"
	"crypto/x509"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CertificateExpiryName is the certificate collector's metric name.
const CertificateExpiryName = "widget_webhook_certificate_expiry_timestamp_seconds"

var certificateExpiryDesc = prometheus.NewDesc(CertificateExpiryName,
	"NotAfter of the serving certificate the webhook server currently presents, as a Unix timestamp. Absent until a certificate is loaded.",
	nil, nil)

// CertificateExpiryCollector exports the expiry of the currently loaded serving certificate.
// Reading it at scrape time follows a rotation (certwatcher reloads the file) without a restart.
type CertificateExpiryCollector struct {
	expiry func() (notAfter time.Time, loaded bool)
}

var _ prometheus.Collector = (*CertificateExpiryCollector)(nil)

// NewCertificateExpiryCollector returns a collector calling current at every scrape; current
// returns nil while no certificate is loaded.
func NewCertificateExpiryCollector(current func() *x509.Certificate) *CertificateExpiryCollector {
	return NewCertificateExpiryCollectorFunc(func() (time.Time, bool) {
		c := current()
		if c == nil {
			return time.Time{}, false
		}
		return c.NotAfter, true
	})
}

// NewCertificateExpiryCollectorFunc is NewCertificateExpiryCollector for callers that keep only
// the expiry: expiry returns the certificate's NotAfter and whether one is loaded.
func NewCertificateExpiryCollectorFunc(expiry func() (notAfter time.Time, loaded bool)) *CertificateExpiryCollector {
	return &CertificateExpiryCollector{expiry: expiry}
}

// Describe implements prometheus.Collector.
func (c *CertificateExpiryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- certificateExpiryDesc
}

// Collect implements prometheus.Collector.
func (c *CertificateExpiryCollector) Collect(ch chan<- prometheus.Metric) {
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

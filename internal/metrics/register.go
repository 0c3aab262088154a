package metrics

import (
	"crypto/x509"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options selects the collectors Register adds. The zero value registers widget_build_info only.
type Options struct {
	// Version is the build's version (widget_build_info's version label); empty means the main
	// module's version from the binary's build information, or "unknown".
	Version string

	// CRDReader reads CustomResourceDefinitions at scrape time; nil leaves out
	// widget_crd_version_info and widget_crd_stored_versions. The manager's cached client works
	// (an informer on CRDs: RBAC get/list/watch on customresourcedefinitions) and so does its API
	// reader (one GET per CRD per scrape: RBAC get).
	CRDReader client.Reader
	// CRDNames are the CRDs to report, e.g. widgets.widgetry.io. Each becomes one crd label value.
	CRDNames []string

	// Certificate returns the serving certificate the webhook server currently presents, or nil
	// when none is loaded yet; nil leaves out widget_webhook_certificate_expiry_timestamp_seconds
	// and widget_webhook_certificate_not_before_timestamp_seconds.
	// For controller-runtime's certwatcher: LeafCertificate(watcher.GetCertificate).
	Certificate func() *x509.Certificate
	// CertificateExpiry is the alternative to Certificate for callers that keep only the
	// expiry: the NotAfter of the certificate presented now and whether one is loaded (no
	// NotBefore is exported then). Setting both is an error.
	CertificateExpiry func() (notAfter time.Time, loaded bool)

	// Placement is where this replica runs; nil (outside a pod, where the node is not known)
	// leaves out widget_replica_placement_info.
	Placement *Placement

	// Log receives CRD read errors (a scrape never fails because of them). Zero value: discard.
	Log logr.Logger
}

// Register adds the collectors selected by opts to reg (for the manager: controller-runtime's
// metrics.Registry, so they are served next to its own metrics).
func Register(reg prometheus.Registerer, opts Options) error {
	collectors := []prometheus.Collector{NewBuildInfoCollector(opts.Version)}
	if opts.CRDReader != nil {
		if len(opts.CRDNames) == 0 {
			return fmt.Errorf("register CRD metrics: a CRD reader is set but no CRD names")
		}
		collectors = append(collectors, NewCRDCollector(opts.CRDReader, opts.Log, opts.CRDNames...))
	}
	if opts.Placement != nil {
		collectors = append(collectors, NewPlacementCollector(*opts.Placement))
	}
	switch {
	case opts.Certificate != nil && opts.CertificateExpiry != nil:
		return fmt.Errorf("register certificate metrics: set Certificate or CertificateExpiry, not both")
	case opts.Certificate != nil:
		collectors = append(collectors, NewCertificateExpiryCollector(opts.Certificate))
	case opts.CertificateExpiry != nil:
		collectors = append(collectors, NewCertificateExpiryCollectorFunc(opts.CertificateExpiry))
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register widget metrics: %w", err)
		}
	}
	return nil
}

package manager

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/widgetry/widget-operator/internal/serving"
)

// The metrics, probe and pprof servers are ours, not controller-runtime's (whose allow 1 MiB of
// headers for 32 s, no read timeout and any number of connections): each within its
// serving.Limits and connection caps, counted by listener.

// Failed authentications on the metrics endpoint: a source may fail MetricsAuthFailureBurst
// times, then once per MetricsAuthFailureEvery (each failure with a new token cost a
// TokenReview).
const (
	MetricsAuthFailureBurst = 10
	MetricsAuthFailureEvery = rate.Limit(1)
)

// addServers adds the metrics endpoint, the probes and pprof, those that opts does not
// disable, to mgr.
func addServers(log logr.Logger, mgr ctrl.Manager, opts Options, probes *serving.Probes, listeners *serving.ListenerMetrics) error {
	if err := addMetricsServer(log, mgr, opts, listeners, metrics.Registry); err != nil {
		return err
	}
	if err := addProbeServer(mgr, opts.HealthProbeBindAddress, probes, listeners); err != nil {
		return err
	}
	return addPprofServer(mgr, opts.PprofBindAddress, listeners)
}

// disabled tells whether a bind address turns its server off.
func disabled(addr string) bool { return addr == "" || addr == "0" }

// addProbeServer serves probes on addr (unless disabled).
func addProbeServer(mgr ctrl.Manager, addr string, probes *serving.Probes, listeners *serving.ListenerMetrics) error {
	if disabled(addr) {
		return nil
	}
	srv, err := serving.NewServer("probes", addr, serving.ProbeLimits, listeners, nil, probes.Handler())
	if err != nil {
		return err
	}
	return mgr.Add(srv)
}

// addPprofServer serves net/http/pprof on addr (unless disabled).
func addPprofServer(mgr ctrl.Manager, addr string, listeners *serving.ListenerMetrics) error {
	if disabled(addr) {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv, err := serving.NewServer("pprof", addr, serving.PprofLimits, listeners, nil, mux)
	if err != nil {
		return err
	}
	return mgr.Add(srv)
}

// addMetricsServer serves /metrics over HTTPS on opts.MetricsBindAddress (unless disabled),
// behind authentication and authorization (a TokenReview and a SubjectAccessReview, as
// controller-runtime's filter does), of what gatherer gathers, with a certificate from opts.MetricsCertDir (reloaded
// when it changes) or, without one, a self-signed certificate.
func addMetricsServer(log logr.Logger, mgr ctrl.Manager, opts Options, listeners *serving.ListenerMetrics, gatherer prometheus.Gatherer) error {
	if disabled(opts.MetricsBindAddress) {
		return nil
	}
	cfg := &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	TLSOptions(opts.TLSMinVersion, opts.EnableHTTP2)(cfg)
	if opts.MetricsCertDir != "" {
		watcher, err := certwatcher.New(filepath.Join(opts.MetricsCertDir, "tls.crt"), filepath.Join(opts.MetricsCertDir, "tls.key"))
		if err != nil {
			return fmt.Errorf("metrics certificate: %w", err)
		}
		if err := mgr.Add(watcher); err != nil {
			return err
		}
		cfg.GetCertificate = watcher.GetCertificate
	} else {
		// As kube-controller-manager's metrics by default: encrypted, not verifiable.
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithFixtures("localhost", []net.IP{{127, 0, 0, 1}}, nil, "")
		if err != nil {
			return fmt.Errorf("self-signed metrics certificate: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return fmt.Errorf("self-signed metrics certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	filter, err := filters.WithAuthenticationAndAuthorization(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("metrics authentication and authorization: %w", err)
	}
	failures, err := serving.NewAuthFailureLimiter("metrics", MetricsAuthFailureBurst, MetricsAuthFailureEvery, metrics.Registry)
	if err != nil {
		return fmt.Errorf("register metrics authentication limits: %w", err)
	}
	authorized, err := filter(log.WithName("metrics-auth"), failures.Reached(promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})))
	if err != nil {
		return fmt.Errorf("metrics authentication and authorization: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", failures.Wrap(authorized))
	srv, err := serving.NewServer("metrics", opts.MetricsBindAddress, serving.MetricsLimits, listeners, cfg, mux)
	if err != nil {
		return err
	}
	return mgr.Add(srv)
}

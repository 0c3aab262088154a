// Package manager runs widget-manager: the Widget controller under leader election and the
// webhooks (conversion, defaulting, validation) active on every replica, behind one HTTPS
// server, with secure metrics and separate health probes.
//
// The controller and the webhooks run in two controller-runtime managers so that shutdown can
// be ordered: on SIGTERM readiness fails at once, the controller stops and releases its lease
// (a standby takes over within a retry period), the webhooks keep serving for the drain delay
// while endpoints are removed, and only then shut down. With a single manager the lease would
// be released only after every runnable, webhooks included, stopped.
//
// One process may run both (Components "all", as the envtest tier does), or each its own
// (the chart's two containers, "webhooks" and "controller"): then a controller that is killed
// or crashes never takes a webhook server, and the apiserver's requests in flight on it, down.
// The controller's metrics then reach Prometheus through the webhook side's endpoint, read
// from a Unix socket the two containers share.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/certtrust"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	widgetmetrics "github.com/widgetry/widget-operator/internal/metrics"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/serving"
	"github.com/widgetry/widget-operator/internal/upgrade"
	"github.com/widgetry/widget-operator/internal/version"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// LeaderElectionID is the Lease the controller replicas compete for.
const LeaderElectionID = "widget-operator.widgetry.io"

// Components say what a process runs: both (the default, one process per replica), or one
// of them, as the chart's two containers do so that a killed controller leaves the webhooks
// serving.
const (
	ComponentsAll        = "all"
	ComponentsWebhooks   = "webhooks"
	ComponentsController = "controller"
)

// Options configure Run; cmd/widget-manager maps flags onto them.
type Options struct {
	// Components is ComponentsAll, ComponentsWebhooks or ComponentsController.
	Components string
	// ControllerMetricsSocket is the Unix socket the controller serves its metrics on (with
	// ComponentsController) and the webhook side re-exports them from, labelled
	// process="controller" (with ComponentsWebhooks); empty: none.
	ControllerMetricsSocket string
	// Namespace is the manager's own namespace: the catalog and the leader-election Lease.
	Namespace string
	// MaxConcurrentReconciles is how many Widgets the controller reconciles at once.
	MaxConcurrentReconciles int

	WebhookPort     int
	WebhookCertDir  string
	WebhookCertName string
	WebhookKeyName  string
	// WebhookConfigurationName names the Mutating and ValidatingWebhookConfiguration whose
	// caBundles, with the CRD's, the serving certificate must verify against to be Ready;
	// empty: the CRD's only.
	WebhookConfigurationName string
	// HoldUntrustedCertificates is the reload gate: a renewed serving certificate is served
	// only once the caBundles trust it (servingCertificate). Off, a renewal is served the
	// moment it is read, as controller-runtime's certwatcher does.
	HoldUntrustedCertificates bool
	// CABundleSecret, when set, is the Secret cainjector injects the caBundles from; the
	// leader keeps its ca.crt overlapping every CA rotation (internal/cabundle), from the
	// serving Secret ServingSecret and the replicas behind the Service WebhookServiceName.
	CABundleSecret     string
	ServingSecret      string
	WebhookServiceName string
	// CABundleInterval is how often the leader re-plans the bundle.
	CABundleInterval time.Duration
	// GCPercent is the garbage collector's target in force (internal/memlimit), for the log.
	GCPercent int
	// MemoryLimit is the Go memory limit in force (see internal/memlimit); 0 means none.
	// The webhook server's in-flight budget and body limits are derived from it.
	MemoryLimit int64
	// WebhookInFlightBytes is the in-flight budget; 0 derives it from MemoryLimit (none
	// without one).
	WebhookInFlightBytes int64
	// WebhookBudgetWait is how long a request waits for its share of the budget.
	WebhookBudgetWait time.Duration
	// WebhookMaxConnections and WebhookMaxConnectionsPerSource cap the webhook server's open
	// connections, in all and from one source address (webhookLimits has the defaults).
	WebhookMaxConnections, WebhookMaxConnectionsPerSource int
	// MaxConversionBodyBytes bounds a ConversionReview, MaxAdmissionBodyBytes an
	// AdmissionReview; 0 derives each from the budget (webhook.LimitsFor).
	MaxConversionBodyBytes int64
	MaxAdmissionBodyBytes  int64

	// MetricsBindAddress serves /metrics over HTTPS behind authentication and authorization;
	// "0" disables it.
	MetricsBindAddress string
	// MetricsCertDir holds tls.crt/tls.key for metrics; empty means a self-signed certificate.
	MetricsCertDir         string
	HealthProbeBindAddress string
	// PprofBindAddress serves net/http/pprof, unauthenticated, for a heap or CPU profile
	// taken through kubectl port-forward; "" or "0" (the default) disables it.
	PprofBindAddress string

	// TLSMinVersion is tls.VersionTLS12 or tls.VersionTLS13.
	TLSMinVersion uint16
	// EnableHTTP2 re-enables HTTP/2 on the webhook and metrics servers (off: CVE-2023-44487,
	// CVE-2023-39325).
	EnableHTTP2 bool

	// NodeName and NodeZone are where this replica runs (the chart passes the pod's node and
	// its topology.kubernetes.io/zone label), exported as widget_replica_placement_info by the
	// process that serves the webhooks, so that an alert sees replicas that share one node or
	// one zone; an empty NodeName exports nothing.
	NodeName, NodeZone string

	LeaderElection bool
	// LeaderElectionIdentity names this replica in the Lease (the chart passes the pod name);
	// empty means hostname plus a random suffix.
	LeaderElectionIdentity string
	LeaseDuration          time.Duration
	RenewDeadline          time.Duration
	RetryPeriod            time.Duration

	// DrainDelay is how long webhooks keep serving after SIGTERM, with readiness failing,
	// so endpoints are removed before the server stops.
	DrainDelay time.Duration
	// ConnectionDrainTimeout bounds, from SIGTERM, how long the webhooks keep serving after
	// DrainDelay while clients still hold connections open or new ones still arrive
	// (timedWebhookServer.Quiesce): the apiserver closes an idle webhook connection 90 s
	// after its last request, so a bound above that never closes one under it.
	ConnectionDrainTimeout time.Duration
	// GracefulShutdownTimeout bounds each manager's shutdown.
	GracefulShutdownTimeout time.Duration
}

// DefaultOptions are the defaults cmd/widget-manager's flags start from.
// DefaultMaxConcurrentReconciles is the controller's default number of workers: a restart's
// first pass over 100,000 Widgets is a read of each Widget and child, mostly waiting on the
// apiserver, and BenchmarkControllerRestartAtScale measures it.
const DefaultMaxConcurrentReconciles = 4

func DefaultOptions() Options {
	return Options{
		Components:                     ComponentsAll,
		MaxConcurrentReconciles:        DefaultMaxConcurrentReconciles,
		WebhookPort:                    9443,
		WebhookCertDir:                 "/tmp/k8s-webhook-server/serving-certs",
		WebhookCertName:                "tls.crt",
		WebhookKeyName:                 "tls.key",
		HoldUntrustedCertificates:      true,
		CABundleInterval:               2 * time.Second,
		WebhookBudgetWait:              5 * time.Second,
		WebhookMaxConnections:          webhookLimits.MaxConns,
		WebhookMaxConnectionsPerSource: webhookLimits.MaxConnsPerSource,
		MetricsBindAddress:             ":8443",
		HealthProbeBindAddress:         ":8081",
		TLSMinVersion:                  tls.VersionTLS12,
		LeaderElection:                 true,
		LeaseDuration:                  15 * time.Second,
		RenewDeadline:                  10 * time.Second,
		RetryPeriod:                    2 * time.Second,
		DrainDelay:                     10 * time.Second,
		ConnectionDrainTimeout:         95 * time.Second,
		GracefulShutdownTimeout:        30 * time.Second,
	}
}

// TLSOptions returns the tls.Config settings of every server the manager runs: a minimum
// version and, unless enabled, no HTTP/2.
func TLSOptions(minVersion uint16, enableHTTP2 bool) func(*tls.Config) {
	return func(c *tls.Config) {
		c.MinVersion = minVersion
		if !enableHTTP2 {
			c.NextProtos = []string{"http/1.1"}
		}
	}
}

// Run starts the webhooks and the controller and blocks until ctx is cancelled, then shuts
// down in order: readiness fails, the controller stops and releases its lease, the webhooks
// drain for DrainDelay and stop.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	log := logf.FromContext(ctx)
	if opts.Namespace == "" {
		return errors.New("the manager's namespace is not set: pass --namespace or set POD_NAMESPACE")
	}
	switch opts.Components {
	case ComponentsAll, ComponentsWebhooks, ComponentsController:
	default:
		return fmt.Errorf("--components=%q: want %s, %s or %s", opts.Components, ComponentsAll, ComponentsWebhooks, ComponentsController)
	}
	if opts.ConnectionDrainTimeout < opts.DrainDelay {
		return fmt.Errorf("--connection-drain-timeout (%s) is shorter than --drain-delay (%s): both count from SIGTERM, and the connection drain follows the drain delay", opts.ConnectionDrainTimeout, opts.DrainDelay)
	}
	if opts.CABundleSecret != "" && (opts.ServingSecret == "" || opts.WebhookServiceName == "") {
		return errors.New("--ca-bundle-secret needs --serving-secret and --webhook-service-name: the bundle follows the serving Secret's CA and the certificates the Service's replicas serve")
	}
	s := scheme.New()
	var draining atomic.Bool
	var host ctrl.Manager
	var quiesce func(context.Context, time.Duration) int
	var err error
	if opts.Components == ComponentsController {
		host, err = newControllerHost(cfg, opts, s, &draining)
	} else {
		host, quiesce, err = setupWebhookSide(log, cfg, opts, s, &draining)
	}
	if err != nil {
		return err
	}
	runController := func(ctx context.Context) { <-ctx.Done() }
	if opts.Components != ComponentsWebhooks {
		if runController, err = controllerRunner(log, cfg, opts, s); err != nil {
			return err
		}
	}
	return runManagers(ctx, log, opts, &draining, host, quiesce, runController)
}

// setupWebhookSide builds the manager of the webhooks: the HTTPS server with its serving
// certificate, reload gate and drain, the metrics endpoint (with the controller's metrics
// from its socket when the controller runs in another container) and the probes. It returns
// the manager and the drain's quiesce.
func setupWebhookSide(log logr.Logger, cfg *rest.Config, opts Options, s *runtime.Scheme, draining *atomic.Bool) (ctrl.Manager, func(context.Context, time.Duration) int, error) {
	cert := newServingCertificate(opts.WebhookCertDir, opts.WebhookCertName, opts.WebhookKeyName)
	tlsOpts := TLSOptions(opts.TLSMinVersion, opts.EnableHTTP2)
	listeners, err := serving.NewListenerMetrics(metrics.Registry)
	if err != nil {
		return nil, nil, fmt.Errorf("register listener metrics: %w", err)
	}
	limits := webhookLimits
	limits.MaxConns, limits.MaxConnsPerSource = opts.WebhookMaxConnections, opts.WebhookMaxConnectionsPerSource
	webhookServer := newTimedWebhookServer(opts.WebhookPort, limits, listeners, tlsOpts, func(c *tls.Config) {
		c.GetCertificate = cert.GetCertificate
	})
	webhookMgr, err := newWebhookManager(cfg, opts, s, cert, webhookServer)
	if err != nil {
		return nil, nil, err
	}
	probes := serving.NewProbes()
	if err := addServers(log, webhookMgr, opts, probes, listeners); err != nil {
		return nil, nil, err
	}
	if err := setupWebhooks(log, webhookMgr, opts, draining, cert); err != nil {
		return nil, nil, err
	}
	if err := setupMetrics(log, webhookMgr, opts, cert); err != nil {
		return nil, nil, err
	}
	if opts.Components == ComponentsWebhooks && opts.ControllerMetricsSocket != "" {
		remote := widgetmetrics.NewRemoteCollector(opts.ControllerMetricsSocket, "process", "controller", log.WithName("controller-metrics"))
		if err := metrics.Registry.Register(remote); err != nil {
			return nil, nil, fmt.Errorf("register the controller's metrics: %w", err)
		}
	}
	trust := &trustCheck{cert: cert, reader: webhookMgr.GetClient(), crdName: crd.WidgetName, webhookConfig: opts.WebhookConfigurationName,
		log: log.WithName("certificate-trust")}
	if opts.HoldUntrustedCertificates {
		cert.admit = trust.admit
	}
	if err := metrics.Registry.Register(widgetmetrics.NewCertificateTrustCollector(trust.metricsStatus)); err != nil {
		return nil, nil, fmt.Errorf("register certificate trust metrics: %w", err)
	}
	if err := setupChecks(probes, webhookServer.ServingChecker(), cert, trust, draining); err != nil {
		return nil, nil, err
	}
	return webhookMgr, webhookServer.Quiesce, nil
}

// controllerRunner returns what runs the Widget controller (and the CA bundle's writer) under
// leader election, rebuilt after every failure (superviseController): the controller's setup
// reads the CRD, and a missing CRD, an unknown storage version or RBAC denied must not stop
// the process.
func controllerRunner(log logr.Logger, cfg *rest.Config, opts Options, s *runtime.Scheme) (func(context.Context), error) {
	ctrlMetrics, err := newControllerMetrics(metrics.Registry)
	if err != nil {
		return nil, fmt.Errorf("register controller metrics: %w", err)
	}
	bundleCertificates := widgetmetrics.NewCABundleGauge()
	if opts.CABundleSecret != "" {
		if err := metrics.Registry.Register(bundleCertificates); err != nil {
			return nil, fmt.Errorf("register CA bundle metrics: %w", err)
		}
	}
	buildController := func(ctx context.Context) (ctrl.Manager, error) {
		if err := checkControllerRBAC(ctx, cfg, opts.Namespace, caBundlePermissions(opts)); err != nil {
			return nil, err
		}
		controllerMgr, err := newControllerManager(cfg, opts, s)
		if err != nil {
			return nil, err
		}
		if err := setupReconcilers(ctx, controllerMgr, opts); err != nil {
			return nil, err
		}
		if opts.CABundleSecret != "" {
			if err := controllerMgr.Add(newCABundleMaintainer(controllerMgr, opts, bundleCertificates)); err != nil {
				return nil, err
			}
		}
		return controllerMgr, nil
	}
	return func(ctx context.Context) {
		superviseController(ctx, log.WithName("supervisor"), ctrlMetrics, newControllerBackoff(), func() (starter, error) {
			m, err := buildController(ctx)
			if err != nil {
				return nil, err
			}
			return m, nil
		})
	}, nil
}

// newControllerHost is the manager of a controller-only process (the chart's controller
// container): no webhooks; probes, and metrics on a Unix socket the webhook container
// re-exports (a killed controller never takes the webhooks with it).
func newControllerHost(cfg *rest.Config, opts Options, s *runtime.Scheme, draining *atomic.Bool) (ctrl.Manager, error) {
	host, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  s,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0", // ours: addProbeServer
		GracefulShutdownTimeout: &opts.GracefulShutdownTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("create the controller's host manager: %w", err)
	}
	listeners, err := serving.NewListenerMetrics(metrics.Registry)
	if err != nil {
		return nil, fmt.Errorf("register listener metrics: %w", err)
	}
	probes := serving.NewProbes()
	if err := addProbeServer(host, opts.HealthProbeBindAddress, probes, listeners); err != nil {
		return nil, err
	}
	if err := addPprofServer(host, opts.PprofBindAddress, listeners); err != nil {
		return nil, err
	}
	if opts.ControllerMetricsSocket != "" {
		// The single-Deployment layout before the planes: the webhook container of the same
		// pod re-exports these metrics.
		if err := host.Add(&socketMetricsServer{path: opts.ControllerMetricsSocket}); err != nil {
			return nil, err
		}
	} else if !disabled(opts.MetricsBindAddress) {
		// The controller plane: its own Deployment, its own HTTPS endpoint behind
		// authentication and authorization, every series labelled process="controller" as the
		// alerts and dashboards select them.
		log := logf.Log.WithName("controller-metrics")
		if err := addMetricsServer(log, host, opts, listeners, widgetmetrics.Labelled(metrics.Registry, "process", "controller")); err != nil {
			return nil, err
		}
		if err := registerMigrationMetrics(log, host.GetAPIReader(), opts.Namespace); err != nil {
			return nil, err
		}
	}
	if err := probes.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	err = probes.AddReadyzCheck("shutdown", func(*http.Request) error {
		if draining.Load() {
			return errors.New("shutting down")
		}
		return nil
	})
	return host, err
}

// newWebhookManager creates the manager of every replica, leader or not: it owns the one
// HTTPS webhook server, the metrics endpoint and the health probes, and runs the serving
// certificate's reloader. It has no leader election, so a standby replica serves conversion
// and admission too.
func newWebhookManager(cfg *rest.Config, opts Options, scheme *runtime.Scheme, cert *servingCertificate, webhookServer *timedWebhookServer) (ctrl.Manager, error) {
	webhookMgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:        scheme,
		WebhookServer: webhookServer,
		// Metrics, probes and pprof are served by servers of ours (addServers).
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: &opts.GracefulShutdownTimeout,
		// The webhooks read nothing from the cluster; the metrics collectors read the CRD.
		Cache: cache.Options{ByObject: webhookCache(opts.WebhookConfigurationName)},
	})
	if err != nil {
		return nil, fmt.Errorf("create the webhook manager: %w", err)
	}
	if err := webhookMgr.Add(cert); err != nil {
		return nil, err
	}
	return webhookMgr, nil
}

// webhookCache is what the webhook manager caches: the Widget CRD (the metrics, the
// certificate's judges) and the admission webhook configurations named name (the judges), each
// by a name field selector that RBAC's resourceNames can grant.
func webhookCache(name string) map[client.Object]cache.ByObject {
	objs := map[client.Object]cache.ByObject{
		&apiextensionsv1.CustomResourceDefinition{}: {Field: fields.OneTermEqualSelector("metadata.name", crd.WidgetName)},
	}
	if name != "" {
		objs[&admissionregistrationv1.MutatingWebhookConfiguration{}] = cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", name)}
		objs[&admissionregistrationv1.ValidatingWebhookConfiguration{}] = cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", name)}
	}
	return objs
}

// setupWebhooks registers the conversion, defaulting and validating handlers on the webhook
// manager's server, each wrapped so that it closes connections while the replica drains, and
// the answer naming the certificate the server presents.
func setupWebhooks(log logr.Logger, webhookMgr ctrl.Manager, opts Options, draining *atomic.Bool, cert *servingCertificate) error {
	// The manager starts its webhook server only once it has been asked for it.
	webhookServer := webhookMgr.GetWebhookServer()
	convMetrics, err := webhook.NewConversionMetrics(metrics.Registry)
	if err != nil {
		return fmt.Errorf("register conversion metrics: %w", err)
	}
	limits, err := webhook.LimitsFor(opts.MemoryLimit, opts.WebhookInFlightBytes, opts.MaxConversionBodyBytes, opts.MaxAdmissionBodyBytes)
	if err != nil {
		return err
	}
	var budget *webhook.InFlightBudget
	if limits.InFlightBytes > 0 {
		if budget, err = webhook.NewInFlightBudget(limits.InFlightBytes, opts.WebhookBudgetWait, metrics.Registry); err != nil {
			return fmt.Errorf("register webhook budget metrics: %w", err)
		}
	}
	log.Info("webhook memory bounds", "memoryLimit", opts.MemoryLimit, "gcPercent", opts.GCPercent, "inFlightBytes", limits.InFlightBytes,
		"maxConversionBodyBytes", limits.MaxConversionBody, "maxAdmissionBodyBytes", limits.MaxAdmissionBody)
	// While draining, answers carry "Connection: close": the apiserver keeps connections to
	// the webhook Service alive, and a kept-alive connection stays pinned to this pod after
	// its endpoint is gone (kube-proxy only steers new connections), so it would fail once the
	// server stops. Closed after each answer, the next request dials again and reaches a pod
	// that is still ready.
	closeWhenDraining := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if draining.Load() {
				w.Header().Set("Connection", "close")
			}
			h.ServeHTTP(w, r)
		})
	}
	convert := &webhook.ConversionHandler{MaxBodyBytes: limits.MaxConversionBody, Metrics: convMetrics,
		Log: webhook.NewFailureLog(log.WithName("conversion-webhook"), 1, 10)}
	admission := func(h admission.Handler) http.Handler {
		return webhook.LimitBody(limits.MaxAdmissionBody, "--admission-max-body-bytes", &crwebhook.Admission{Handler: h})
	}
	webhookServer.Register(webhook.ConvertPath, closeWhenDraining(budget.Limit(webhook.ConvertPath, webhook.ConversionPeakFactor, limits.MaxConversionBody, convert)))
	webhookServer.Register(webhook.MutatePath, closeWhenDraining(budget.Limit(webhook.MutatePath, webhook.AdmissionPeakFactor, limits.MaxAdmissionBody, admission(webhook.Defaulter{}))))
	webhookServer.Register(webhook.ValidatePath, closeWhenDraining(budget.Limit(webhook.ValidatePath, webhook.AdmissionPeakFactor, limits.MaxAdmissionBody, admission(webhook.Validator{}))))
	webhookServer.Register(certtrust.ServedPath, certtrust.ServedHandler(func() *tls.Certificate { c, _ := cert.GetCertificate(nil); return c }, cert.Held))
	return nil
}

// setupMetrics registers the operator's own collectors (build info, CRD versions, serving
// certificate expiry, migration progress) next to controller-runtime's, so that every
// replica exports them, not only the leader.
func setupMetrics(log logr.Logger, webhookMgr ctrl.Manager, opts Options, cert *servingCertificate) error {
	// The CRD and migration collectors read at scrape time through the API reader: a GET of
	// one CRD and a LIST of the progress ConfigMaps in the manager's namespace per scrape,
	// cheaper than caching ConfigMaps for this alone.
	if err := widgetmetrics.Register(metrics.Registry, widgetmetrics.Options{
		Version:     version.Version,
		CRDReader:   webhookMgr.GetAPIReader(),
		CRDNames:    []string{crd.WidgetName},
		Certificate: widgetmetrics.LeafCertificate(cert.GetCertificate),
		Placement:   placement(opts),
		Log:         log.WithName("metrics"),
	}); err != nil {
		return err
	}
	if opts.Components == ComponentsWebhooks && opts.ControllerMetricsSocket == "" {
		// The webhook plane on its own may read nothing in its namespace: the controller
		// plane exports the migration's progress.
		return nil
	}
	return registerMigrationMetrics(log, webhookMgr.GetAPIReader(), opts.Namespace)
}

// placement is where this replica runs, nil when its node is not known.
func placement(opts Options) *widgetmetrics.Placement {
	if opts.NodeName == "" {
		return nil
	}
	return &widgetmetrics.Placement{Node: opts.NodeName, Zone: opts.NodeZone}
}

// registerMigrationMetrics exports the migration's progress, read at scrape time from the
// progress ConfigMaps in namespace: by the controller plane, or by the process that runs the
// webhooks where it may read them (one process for both, or the single-Deployment layout).
func registerMigrationMetrics(log logr.Logger, reader client.Reader, namespace string) error {
	if err := metrics.Registry.Register(migrate.NewProgressCollector(reader, namespace).WithLogger(log.WithName("migration-metrics"))); err != nil {
		return fmt.Errorf("register migration metrics: %w", err)
	}
	return nil
}

// setupChecks adds the health probes. Liveness is a ping; readiness needs a loaded serving
// certificate, a started webhook server and this build's conversion passing its round trips
// (so a build that loses data never takes traffic, even with the chart's hooks off), and fails
// as soon as the replica drains, so that its endpoint leaves the webhook Service before the
// server stops.
func setupChecks(probes *serving.Probes, webhookServing healthz.Checker, cert *servingCertificate, trust *trustCheck, draining *atomic.Bool) error {
	if err := probes.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	for name, check := range map[string]healthz.Checker{
		"certificate":       cert.Check,
		"certificate-trust": trust.Check,
		"webhook":           webhookServing,
		"conversion":        conversionSelfTest,
		"shutdown": func(*http.Request) error {
			if draining.Load() {
				return errors.New("shutting down: draining webhook traffic")
			}
			return nil
		},
	} {
		if err := probes.AddReadyzCheck(name, check); err != nil {
			return err
		}
	}
	return nil
}

// buildConversion is the result of this build's conversion round trips, run once: conversion is
// deterministic, so one run tells for the life of the process.
var buildConversion = sync.OnceValue(func() error {
	cfg := upgrade.WidgetConfig()
	return upgrade.ProbeBuildConversion(context.Background(), cfg, v1.GroupVersion.Group, "Widget")
})

func conversionSelfTest(*http.Request) error {
	if err := buildConversion(); err != nil {
		return fmt.Errorf("this build's conversion fails its round trips, it must not take traffic: %w", err)
	}
	return nil
}

// newControllerManager creates the manager that runs the Widget controller under leader
// election. It serves neither metrics nor probes (the webhook manager does) and releases its
// lease when stopped, so a standby takes over within a retry period instead of a lease
// duration.
func newControllerManager(cfg *rest.Config, opts Options, scheme *runtime.Scheme) (ctrl.Manager, error) {
	leaseDuration, renewDeadline, retryPeriod := opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod
	lock, err := leaseLock(cfg, opts)
	if err != nil {
		return nil, err
	}
	controllerMgr, err := ctrl.NewManager(cfg, ctrl.Options{
		LeaderElectionResourceLockInterface: lock,
		Scheme:                              scheme,
		Metrics:                             metricsserver.Options{BindAddress: "0"}, // served by the webhook manager
		HealthProbeBindAddress:              "0",
		LeaderElection:                      opts.LeaderElection,
		LeaderElectionID:                    LeaderElectionID,
		LeaderElectionNamespace:             opts.Namespace,
		LeaderElectionReleaseOnCancel:       true,
		LeaseDuration:                       &leaseDuration,
		RenewDeadline:                       &renewDeadline,
		RetryPeriod:                         &retryPeriod,
		GracefulShutdownTimeout:             &opts.GracefulShutdownTimeout,
		Cache:                               controller.CacheOptions(opts.Namespace),
		// The supervisor builds the controller again, under the same name, after a failure.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("create the controller manager: %w", err)
	}
	return controllerMgr, nil
}

// setupReconcilers adds the Widget controller to the controller manager. Its setup reads the
// CRD to find the storage version to watch, so it needs the apiserver before anything starts.
func setupReconcilers(ctx context.Context, controllerMgr ctrl.Manager, opts Options) error {
	reconciler := &controller.WidgetReconciler{
		Client:                  controllerMgr.GetClient(),
		APIReader:               controllerMgr.GetAPIReader(),
		Cache:                   controllerMgr.GetCache(),
		Recorder:                controllerMgr.GetEventRecorder("widget-controller"),
		CatalogNamespace:        opts.Namespace,
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
	}
	if err := reconciler.SetupWithManager(ctx, controllerMgr); err != nil {
		return fmt.Errorf("set up the Widget controller: %w", err)
	}
	return nil
}

// drainQuietPeriod is how long no new webhook connection may have come before the drain ends:
// kube-proxy routes new connections to a replica until it has caught up with the endpoint's
// removal, later on a busy node.
const drainQuietPeriod = 3 * time.Second

// runManagers starts the webhook manager and the controller (runController, which returns
// only once its context ends: failures are retried inside it), each under its own context
// detached from ctx, and waits for ctx to end or the webhook manager to stop; then it shuts
// down in order. Readiness fails first (draining), the controller stops and releases its
// lease, the webhooks keep serving for DrainDelay from then while endpoints are removed, and
// on until quiesce reports every client connection closed and none new for
// drainQuietPeriod, at most until ConnectionDrainTimeout from then (or until they stop by
// themselves); then they stop. A clean shutdown returns nil.
func runManagers(ctx context.Context, log logr.Logger, opts Options, draining *atomic.Bool, webhookMgr ctrl.Manager,
	quiesce func(context.Context, time.Duration) int, runController func(context.Context)) error {
	webhookCtx, stopWebhooks := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWebhooks()
	controllerCtx, stopController := context.WithCancel(context.WithoutCancel(ctx))
	defer stopController()
	webhookDone := make(chan error, 1)
	controllerDone := make(chan struct{})
	go func() { webhookDone <- webhookMgr.Start(webhookCtx) }()
	go func() { defer close(controllerDone); runController(controllerCtx) }()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-webhookDone:
		webhookDone <- err
		runErr = fmt.Errorf("webhook server stopped: %w", err)
	}

	// Ordered shutdown.
	draining.Store(true)
	drainStart := time.Now()
	log.Info("shutting down: readiness now fails; stopping the controller and releasing its lease")
	stopController()
	<-controllerDone
	log.Info("controller stopped; webhooks keep serving while endpoints are removed", "drainDelay", opts.DrainDelay)
	webhookStopped := quiesce == nil // no webhooks here: nothing to drain
	if !webhookStopped {
		select {
		case <-time.After(time.Until(drainStart.Add(opts.DrainDelay))):
		case err := <-webhookDone:
			webhookDone <- err
			webhookStopped = true
		}
	}
	if !webhookStopped {
		log.Info("waiting for clients to close their webhook connections", "quietPeriod", drainQuietPeriod, "connectionDrainTimeout", opts.ConnectionDrainTimeout)
		quiesceCtx, cancel := context.WithDeadline(context.Background(), drainStart.Add(opts.ConnectionDrainTimeout))
		open := quiesce(quiesceCtx, drainQuietPeriod)
		cancel()
		if open > 0 {
			log.Info("connection drain timed out: closing the webhook connections clients still hold; a request sent on one as it closes fails",
				"open", open, "connectionDrainTimeout", opts.ConnectionDrainTimeout)
		} else {
			log.Info("every webhook connection closed by its client", "drained", time.Since(drainStart).Round(time.Millisecond))
		}
	}
	stopWebhooks()
	if err := <-webhookDone; err != nil && runErr == nil {
		runErr = fmt.Errorf("webhook server: %w", err)
	}
	log.Info("stopped")
	return runErr
}

// leaseLock is the Lease the controller replicas compete for, under an identity of the
// replica's choosing so that on-call can tell from the Lease which pod leads. Nil (the
// manager's default lock, hostname plus a random suffix) when no identity is set.
func leaseLock(cfg *rest.Config, opts Options) (resourcelock.Interface, error) {
	if !opts.LeaderElection || opts.LeaderElectionIdentity == "" {
		return nil, nil
	}
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, opts.Namespace, LeaderElectionID, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: opts.LeaderElectionIdentity})
}

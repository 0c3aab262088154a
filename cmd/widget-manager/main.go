// Command widget-manager runs the Widget controller (leader-elected) and the conversion,
// defaulting and validation webhooks (on every replica). See internal/manager.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/widgetry/widget-operator/internal/manager"
	"github.com/widgetry/widget-operator/internal/memlimit"
	"github.com/widgetry/widget-operator/internal/version"
)

func main() {
	opts := manager.DefaultOptions()
	fs := flag.CommandLine
	fs.StringVar(&opts.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The manager's namespace: catalog entries and the leader-election Lease (default $POD_NAMESPACE).")
	fs.StringVar(&opts.Components, "components", opts.Components, "What this process runs: all (webhooks and controller), webhooks, or controller (the chart runs them in two containers, so that a killed controller leaves the webhooks serving).")
	fs.StringVar(&opts.ControllerMetricsSocket, "controller-metrics-socket", "", "Unix socket of the controller's metrics: served there with --components=controller, re-exported on the metrics endpoint (labelled process=\"controller\") with --components=webhooks.")
	fs.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", opts.MaxConcurrentReconciles, "Widgets the controller reconciles at once (never one Widget twice at once): a restart reads every Widget and child once, mostly waiting on the apiserver.")
	fs.IntVar(&opts.WebhookPort, "webhook-port", opts.WebhookPort, "Port of the HTTPS webhook server (/convert, /mutate-…, /validate-…).")
	fs.StringVar(&opts.WebhookConfigurationName, "webhook-configuration-name", "", "Name of the Mutating and ValidatingWebhookConfiguration whose caBundles, with the CRD's, the serving certificate must verify against for the replica to be Ready (empty: the CRD's only).")
	fs.BoolVar(&opts.HoldUntrustedCertificates, "hold-untrusted-certificates", opts.HoldUntrustedCertificates, "Serve a renewed certificate only once the caBundles the apiserver verifies with trust it (the current one is served meanwhile); false serves it the moment it is read.")
	fs.StringVar(&opts.CABundleSecret, "ca-bundle-secret", "", "Secret (in --namespace) whose ca.crt cainjector injects into the caBundles; the elected leader keeps it holding the outgoing and incoming CA across a CA rotation. Empty: not maintained.")
	fs.StringVar(&opts.ServingSecret, "serving-secret", "", "The serving Certificate's Secret, whose ca.crt names the CA the bundle must hold (with --ca-bundle-secret).")
	fs.StringVar(&opts.WebhookServiceName, "webhook-service-name", "", "The webhook Service, whose endpoints are asked which certificate they serve before a CA leaves the bundle (with --ca-bundle-secret).")
	fs.DurationVar(&opts.CABundleInterval, "ca-bundle-interval", opts.CABundleInterval, "How often the leader re-plans the CA bundle.")
	fs.StringVar(&opts.WebhookCertDir, "webhook-cert-dir", opts.WebhookCertDir, "Directory with the webhook serving certificate; reloaded when it changes.")
	fs.StringVar(&opts.WebhookCertName, "webhook-cert-name", opts.WebhookCertName, "Certificate file name in --webhook-cert-dir.")
	fs.StringVar(&opts.WebhookKeyName, "webhook-key-name", opts.WebhookKeyName, "Key file name in --webhook-cert-dir.")
	fs.Int64Var(&opts.MaxConversionBodyBytes, "conversion-max-body-bytes", 0, "Largest ConversionReview accepted; the apiserver sends whole LIST pages (0: derived from the memory limit, at most 64Mi).")
	fs.Int64Var(&opts.MaxAdmissionBodyBytes, "admission-max-body-bytes", 0, "Largest AdmissionReview accepted (0: derived from the memory limit, at most 6Mi).")
	fs.Int64Var(&opts.WebhookInFlightBytes, "webhook-inflight-bytes", 0, "Bytes the webhook requests in flight may hold, charged at their handler's peak factor (0: 80% of the Go memory limit; none without one).")
	fs.DurationVar(&opts.WebhookBudgetWait, "webhook-budget-wait", opts.WebhookBudgetWait, "How long a webhook request waits for its share of the in-flight budget before it is refused (503).")
	fs.IntVar(&opts.WebhookMaxConnections, "webhook-max-connections", opts.WebhookMaxConnections, "Connections the webhook server holds open at most; past it new ones wait in the kernel's backlog.")
	fs.IntVar(&opts.WebhookMaxConnectionsPerSource, "webhook-max-connections-per-source", opts.WebhookMaxConnectionsPerSource, "Connections one source address may hold open to the webhook server; past it new ones are closed at once. Raise it when every apiserver call comes through one address (a konnectivity agent, NAT).")
	memoryRatio := fs.Float64("gomemlimit-ratio", 0.9, "Lower the Go memory limit read from GOMEMLIMIT (the chart sets it to the container's memory limit) to this fraction of it, leaving room for memory the Go runtime does not manage.")
	gcPercent := fs.Int("gogc", memlimit.DefaultGCPercent, "Garbage-collection target percentage, what GOGC sets (which wins over this default when set): the manager's heap is mostly its caches, and below 100 the process holds less than twice its live heap.")
	fs.StringVar(&opts.MetricsBindAddress, "metrics-bind-address", opts.MetricsBindAddress, "Address of the HTTPS metrics endpoint (authenticated and authorized); 0 disables it.")
	fs.StringVar(&opts.MetricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt/tls.key for metrics; empty: a self-signed certificate.")
	fs.StringVar(&opts.HealthProbeBindAddress, "health-probe-bind-address", opts.HealthProbeBindAddress, "Address of /healthz and /readyz.")
	fs.StringVar(&opts.PprofBindAddress, "pprof-bind-address", "0", "Address of net/http/pprof, which has no authentication: bind it to 127.0.0.1 and reach it with kubectl port-forward; 0 disables it.")
	tls13 := fs.Bool("tls-min-version-1.3", false, "Require TLS 1.3 (default minimum: TLS 1.2).")
	fs.BoolVar(&opts.EnableHTTP2, "enable-http2", false, "Serve HTTP/2 on the webhook and metrics servers (off by default: HTTP/2 rapid-reset CVEs).")
	fs.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "The node this replica runs on, exported as widget_replica_placement_info (default $NODE_NAME; empty: not exported).")
	fs.StringVar(&opts.NodeZone, "node-zone", os.Getenv("NODE_ZONE"), "The zone of that node (its topology.kubernetes.io/zone label), exported with it (default $NODE_ZONE).")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", opts.LeaderElection, "Elect one controller among the replicas; webhooks run on every replica regardless.")
	fs.StringVar(&opts.LeaderElectionIdentity, "leader-election-identity", os.Getenv("POD_NAME"), "This replica's name in the Lease (default $POD_NAME; empty: hostname and a random suffix).")
	fs.DurationVar(&opts.LeaseDuration, "leader-elect-lease-duration", opts.LeaseDuration, "Lease duration.")
	fs.DurationVar(&opts.RenewDeadline, "leader-elect-renew-deadline", opts.RenewDeadline, "Renew deadline.")
	fs.DurationVar(&opts.RetryPeriod, "leader-elect-retry-period", opts.RetryPeriod, "Retry period.")
	fs.DurationVar(&opts.DrainDelay, "drain-delay", opts.DrainDelay, "After SIGTERM, how long webhooks keep serving (readiness failing) before shutting down.")
	fs.DurationVar(&opts.ConnectionDrainTimeout, "connection-drain-timeout", opts.ConnectionDrainTimeout, "After SIGTERM, the longest the webhooks keep serving, past --drain-delay, while clients (the apiserver) still hold connections open or new ones arrive: this server never closes a kept-alive connection itself, which would fail a request sent on it at that moment, and the apiserver closes an idle one after 90s.")
	fs.DurationVar(&opts.GracefulShutdownTimeout, "graceful-shutdown-timeout", opts.GracefulShutdownTimeout, "Bound on each shutdown phase.")
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Parse()

	if *showVersion {
		fmt.Println("widget-manager", version.String())
		return
	}
	if opts.MaxConcurrentReconciles < 1 {
		fmt.Fprintf(os.Stderr, "widget-manager: --max-concurrent-reconciles=%d: must be at least 1\n", opts.MaxConcurrentReconciles)
		os.Exit(2)
	}
	opts.MemoryLimit = memlimit.Apply(*memoryRatio)
	gcExplicit := false
	fs.Visit(func(f *flag.Flag) { gcExplicit = gcExplicit || f.Name == "gogc" })
	opts.GCPercent = memlimit.SetGCPercent(*gcPercent, gcExplicit)
	if *tls13 {
		opts.TLSMinVersion = tls.VersionTLS13
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "widget-manager: no Kubernetes configuration:", err)
		os.Exit(2)
	}
	if err := manager.Run(ctrl.LoggerInto(ctx, ctrl.Log.WithName("widget-manager")), cfg, opts); err != nil {
		ctrl.Log.Error(err, "widget-manager stopped with an error")
		os.Exit(1)
	}
}

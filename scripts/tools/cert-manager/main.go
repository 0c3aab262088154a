// Command cert-manager runs cert-manager's real controllers and its cainjector in one
// process, built from the cert-manager Go module, for the local end-to-end cluster.
//
// Why a launcher: cert-manager's binaries and images cannot be fetched here (no image
// registry, no release downloads), and its cmd/ packages are separate modules that are not
// on the module proxy at this version; its pkg/ tree is. This program wires the same
// pieces the official controller and cainjector binaries wire: the controller context
// factory with the controllers that registered themselves from init(), and
// cainjector.RegisterAllInjectors on a controller-runtime manager.
//
// Only the self-signed and CA issuers are compiled in (no ACME, Vault or Venafi), leader
// election is off, and cert-manager's webhook is not run (it lives in internal/): the CRDs
// are installed without it, so objects are not defaulted or validated by it.
//
// Usage: cert-manager --kubeconfig FILE [--health-addr 127.0.0.1:9403] [--cluster-resource-namespace cert-manager]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	// The controllers register themselves with controllerpkg from init().
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// The issuer implementations the issuers/clusterissuers controllers check.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the cert-manager controllers this launcher runs, by their registered names.
var controllers = []string{
	"issuers",
	"clusterissuers",
	"certificates-trigger",
	"certificates-issuing",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-readiness",
	"certificates-revision-manager",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificaterequests-issuer-ca",
}

func main() {
	// An own flag set: controller-runtime registers --kubeconfig on flag.CommandLine.
	fs := flag.NewFlagSet("cert-manager", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	healthAddr := fs.String("health-addr", "127.0.0.1:9403", "address serving /healthz and /readyz")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9402", "address serving the controllers' /metrics (certmanager_certificate_*), as cert-manager's controller does on :9402")
	clusterNS := fs.String("cluster-resource-namespace", "cert-manager", "namespace holding ClusterIssuers' Secrets")
	workers := fs.Int("workers", 2, "workers per controller")
	minBackoff := fs.Duration("request-min-backoff", 5*time.Second, "minimum backoff after a failed CertificateRequest")
	maxBackoff := fs.Duration("request-max-backoff", 2*time.Minute, "maximum backoff after a failed CertificateRequest")
	// cert-manager's feature gates, e.g. CAInjectorMerging=false: the cainjector then replaces a
	// caBundle with the source's CA instead of merging it in (the behaviour before the gate).
	featureGates := fs.String("feature-gates", "", "cert-manager feature gates, key=value pairs separated by commas")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.Var(&klogVerbosity{klogFlags}, "v", "log verbosity")
	fs.Parse(os.Args[1:])
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "cert-manager launcher: --kubeconfig (or $KUBECONFIG) is required")
		os.Exit(2)
	}
	if err := utilfeature.DefaultMutableFeatureGate.Set(*featureGates); err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager launcher: --feature-gates: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := klog.NewKlogr().WithName("cert-manager-launcher")
	ctx = logf.NewContext(ctx, log)
	ctrl.SetLogger(log)

	if err := run(ctx, *kubeconfig, *healthAddr, *metricsAddr, *clusterNS, *workers, *minBackoff, *maxBackoff); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, healthAddr, metricsAddr, clusterNS string, workers int, minBackoff, maxBackoff time.Duration) error {
	log := logf.FromContext(ctx)
	var ready atomic.Bool
	srv := healthServer(healthAddr, &ready)
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "health server failed", "addr", healthAddr)
		}
	}()
	defer srv.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The controllers, as cert-manager's controller binary builds them.
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   50,
		KubernetesAPIBurst: 100,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterNS},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: minBackoff,
			CertificateRequestMaximumBackoffDuration: maxBackoff,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: 60},
	})
	if err != nil {
		return fmt.Errorf("building the controller context from %s: %w", kubeconfig, err)
	}
	known := controllerpkg.Known()
	type named struct {
		name string
		ctrl controllerpkg.Interface
	}
	var running []named
	for _, name := range controllers {
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered (registered: %v)", name, keys(known))
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %s: %w", name, err)
		}
		running = append(running, named{name, c})
	}
	// Every Context built by the factory shares the same informer factories.
	shared, err := factory.Build()
	if err != nil {
		return fmt.Errorf("building the shared controller context: %w", err)
	}
	// The Certificate collector (certmanager_certificate_ready_status, _expiration_ and
	// _renewal_timestamp_seconds) reads the shared informer's lister, as in cert-manager's
	// controller, so it is set up before the informers start.
	shared.Metrics.SetupCertificateCollector(shared.SharedInformerFactory.Certmanager().V1().Certificates().Lister())
	metricsLn, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		return fmt.Errorf("metrics listener on %s: %w", metricsAddr, err)
	}
	metricsSrv := shared.Metrics.NewServer(metricsLn)
	go func() {
		if err := metricsSrv.Serve(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "metrics server failed", "addr", metricsAddr)
		}
	}()
	defer metricsSrv.Close()
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	errs := make(chan error, len(running)+1)
	for _, c := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log.Info("starting controller", "controller", c.name)
			if err := c.ctrl.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %s: %w", c.name, err)
			}
		}()
	}

	// The cainjector, as cert-manager's cainjector binary builds it.
	mgr, err := newInjectorManager(kubeconfig)
	if err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return fmt.Errorf("registering the cainjector reconcilers: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			errs <- fmt.Errorf("cainjector manager: %w", err)
		}
	}()
	go func() {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			ready.Store(true)
			log.Info("cert-manager controllers and cainjector running", "controllers", controllers)
		}
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
		cancel()
	}
	wg.Wait()
	return runErr
}

// newInjectorManager builds the controller-runtime manager the cainjector runs on: the
// schemes of every injectable kind, Secrets read uncached (the injector caches only their
// metadata), no leader election, no metrics listener.
func newInjectorManager(kubeconfig string) (ctrl.Manager, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "cert-manager-cainjector"
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client: client.Options{
			Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the cainjector manager: %w", err)
	}
	return mgr, nil
}

// healthServer serves /healthz (the process is alive) and /readyz (caches synced).
func healthServer(addr string, ready *atomic.Bool) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "caches not synced yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

func keys(m map[string]controllerpkg.Constructor) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// klogVerbosity forwards -v to klog's own flag set.
type klogVerbosity struct{ fs *flag.FlagSet }

func (k *klogVerbosity) String() string { return "0" }
func (k *klogVerbosity) Set(v string) error {
	return k.fs.Set("v", v)
}

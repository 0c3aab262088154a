package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/widgetry/widget-operator/internal/scheme"
)

const (
	// defaultStartTimeout bounds the start of each component. envtest's own default (20s)
	// is too tight for a 2-core machine that is also compiling.
	defaultStartTimeout = time.Minute

	// stopTimeout bounds the stop of each component. envtest's default (20s) is too short
	// for an etcd that holds tens of thousands of objects on busy cores (seen with the
	// migration benchmark): its shutdown then fails a test that passed.
	stopTimeout = 2 * time.Minute

	// kubectlTimeout bounds one Kubectl call. Kubectl does not use tb.Context() so that
	// it still works in Cleanup functions, e.g. to dump cluster state after a failure.
	kubectlTimeout = 2 * time.Minute

	// envStartTimeout is envtest's variable; when set, it wins over defaultStartTimeout.
	envStartTimeout = "KUBEBUILDER_CONTROLPLANE_START_TIMEOUT"
)

// Options configures Start. The zero value starts a bare control plane.
type Options struct {
	// CRDs are installed before Start returns; envtest waits until they are served.
	CRDs []*apiextensionsv1.CustomResourceDefinition

	// CRDDirectoryPaths are directories (or files) of CRD manifests to install. A path
	// that does not exist fails the test instead of being silently ignored.
	CRDDirectoryPaths []string

	// WebhookInstallOptions is passed through to envtest. After Start, the serving
	// host, port and certificate directory for the webhook server are in
	// Env.Environment.WebhookInstallOptions.
	WebhookInstallOptions envtest.WebhookInstallOptions

	// Scheme is used by Env.Client and for CRD conversion checks. Nil means a scheme
	// with client-go's built-in types and apiextensions/v1.
	Scheme *runtime.Scheme

	// ControllerManager attaches kube-controller-manager with all its controllers
	// (see Env.StartControllerManager).
	ControllerManager bool

	// APIServerFlags are extra kube-apiserver flags, without the leading "--"; they
	// override envtest's defaults, e.g. {"feature-gates": "Foo=true"}.
	APIServerFlags map[string]string

	// ControllerManagerFlags are extra kube-controller-manager flags, without the
	// leading "--"; they override this package's defaults (see StartControllerManager).
	ControllerManagerFlags map[string]string

	// StartTimeout bounds the start of each component (etcd, kube-apiserver,
	// kube-controller-manager). Zero means $KUBEBUILDER_CONTROLPLANE_START_TIMEOUT,
	// or one minute.
	StartTimeout time.Duration
}

// Env is a running control plane. Its fields are read-only.
type Env struct {
	// Config connects to kube-apiserver as an admin (group system:masters).
	Config *rest.Config
	// Client is a controller-runtime client for Config, using Scheme. It is not cached:
	// reads go straight to the apiserver.
	Client client.Client
	// Scheme is the scheme Client uses.
	Scheme *runtime.Scheme
	// Kubeconfig is the path of a kubeconfig file for Config, for kubectl and for other
	// processes the test starts.
	Kubeconfig string
	// Dir is a temporary directory for the test's own files, removed in Cleanup.
	Dir string
	// AssetsDir is the directory holding the binaries (see Assets).
	AssetsDir string
	// Environment is the underlying envtest environment, for what this package does not
	// wrap (e.g. WebhookInstallOptions after Start, or AddUser).
	Environment *envtest.Environment
	// ControllerManager is the attached kube-controller-manager, nil if none.
	ControllerManager *ControllerManager

	opts   Options
	logDir string
	logs   []*os.File
	// advertised maps the advertise address of each kube-apiserver to its bind address
	// (host:port), once StartAPIServer started a second one.
	advertised map[string]string
}

// Start boots etcd and kube-apiserver through envtest, installs the CRDs and webhooks in
// opts, and attaches kube-controller-manager when opts.ControllerManager is set. Failures
// are fatal to tb; everything is torn down in tb.Cleanup.
func Start(tb testing.TB, opts Options) *Env {
	tb.Helper()
	var extra []string
	if opts.ControllerManager {
		extra = append(extra, kubeControllerManager)
	}
	e := &Env{
		AssetsDir: assets(tb, extra...),
		Dir:       tb.TempDir(),
		Scheme:    opts.Scheme,
		opts:      opts,
	}
	if e.Scheme == nil {
		e.Scheme = scheme.New()
	}
	e.logDir = filepath.Join(e.Dir, "logs")
	if err := os.Mkdir(e.logDir, 0o755); err != nil {
		tb.Fatalf("testenv: creating the log directory: %v", err)
	}
	// Registered after tb.TempDir, so it runs before the directory is removed and can
	// copy the logs out of it.
	tb.Cleanup(func() { e.teardown(tb) })

	e.Environment = e.newEnvironment(tb)
	cfg, err := e.Environment.Start()
	if err != nil {
		tb.Fatalf("testenv: starting the control plane (binaries from %s): %v", e.AssetsDir, err)
	}
	e.Config = cfg
	e.Client, err = client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		tb.Fatalf("testenv: creating the client: %v", err)
	}
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, e.Environment.KubeConfig, 0o600); err != nil {
		tb.Fatalf("testenv: writing the kubeconfig: %v", err)
	}

	if len(opts.CRDs) > 0 || len(opts.CRDDirectoryPaths) > 0 {
		e.installCRDs(tb, envtest.CRDInstallOptions{CRDs: opts.CRDs, Paths: opts.CRDDirectoryPaths, ErrorIfPathMissing: true})
	}
	if opts.ControllerManager {
		e.StartControllerManager(tb)
	}
	return e
}

// InstallCRDs creates CRDs and waits until they are served.
func (e *Env) InstallCRDs(tb testing.TB, crds ...*apiextensionsv1.CustomResourceDefinition) {
	tb.Helper()
	e.installCRDs(tb, envtest.CRDInstallOptions{CRDs: crds})
}

// InstallCRDFiles creates the CRDs of YAML files (other projects' published CRDs) and waits
// until they are served.
func (e *Env) InstallCRDFiles(tb testing.TB, paths ...string) {
	tb.Helper()
	e.installCRDs(tb, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
}

// installCRDs installs CRDs after the control plane is up rather than through
// envtest.Environment: envtest's start-up path rewrites or strips the conversion webhook of
// every CRD whose Go types its scheme does not see as convertible, and this project's CRDs
// carry conversion webhooks of their own.
func (e *Env) installCRDs(tb testing.TB, opts envtest.CRDInstallOptions) {
	tb.Helper()
	if _, err := envtest.InstallCRDs(e.Config, opts); err != nil {
		tb.Fatalf("testenv: installing CRDs: %v", err)
	}
}

// newEnvironment configures envtest: binaries from the assets directory (explicitly, so
// envtest's TEST_ASSET_* and default-path lookups cannot pick up other versions) and
// component output in log files.
func (e *Env) newEnvironment(tb testing.TB) *envtest.Environment {
	tb.Helper()
	apiserverLog := e.createLog(tb, kubeAPIServer)
	etcdLog := e.createLog(tb, etcd)

	apiserver := &envtest.APIServer{
		Path: filepath.Join(e.AssetsDir, kubeAPIServer),
		Out:  apiserverLog,
		Err:  apiserverLog,
	}
	// No --advertise-address: envtest's deprecated default of 127.0.0.1 is refused by
	// current kube-apiservers; without it the apiserver picks a host address itself.
	for name, value := range e.opts.APIServerFlags {
		apiserver.Configure().Set(name, value)
	}
	return &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer:   apiserver,
			Etcd:        &envtest.Etcd{Path: filepath.Join(e.AssetsDir, etcd), Out: etcdLog, Err: etcdLog},
			KubectlPath: filepath.Join(e.AssetsDir, kubectl),
		},
		Scheme:                   e.Scheme,
		WebhookInstallOptions:    e.opts.WebhookInstallOptions,
		BinaryAssetsDirectory:    e.AssetsDir,
		ControlPlaneStartTimeout: e.startTimeout(),
		ControlPlaneStopTimeout:  stopTimeout,
	}
}

// startTimeout is opts.StartTimeout, defaulted; zero lets envtest read its variable.
func (e *Env) startTimeout() time.Duration {
	switch {
	case e.opts.StartTimeout > 0:
		return e.opts.StartTimeout
	case os.Getenv(envStartTimeout) != "":
		return 0
	default:
		return defaultStartTimeout
	}
}

// teardown stops every component Start launched and keeps the logs if tb failed. A
// kube-controller-manager attached through Start is already stopped by its own,
// later-registered cleanup.
func (e *Env) teardown(tb testing.TB) {
	if e.Environment != nil {
		if err := e.Environment.Stop(); err != nil {
			tb.Errorf("testenv: stopping etcd and kube-apiserver: %v", err)
		}
	}
	for _, f := range e.logs {
		_ = f.Close()
	}
	if tb.Failed() {
		keepLogs(tb, e.logDir)
	}
}

// createLog opens the log file of one component in the log directory.
func (e *Env) createLog(tb testing.TB, component string) *os.File {
	tb.Helper()
	// Appending keeps the log of an earlier run of the component, e.g. a
	// kube-controller-manager attached to one subtest and then to another.
	f, err := os.OpenFile(filepath.Join(e.logDir, component+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatalf("testenv: creating the %s log: %v", component, err)
	}
	e.logs = append(e.logs, f)
	return f
}

// Kubectl runs the kubectl from the assets directory against this Env and returns its
// standard output. The error includes kubectl's standard error. It may be called from
// Cleanup functions.
func (e *Env) Kubectl(tb testing.TB, args ...string) (stdout string, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, filepath.Join(e.AssetsDir, kubectl),
		append([]string{"--kubeconfig=" + e.Kubeconfig}, args...)...)
	// Keep kubectl's discovery cache with the test rather than in $HOME/.kube.
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(e.Dir, "kubectl-cache"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// Shell runs script with bash as on-call would from a runbook: kubectl on the PATH and
// KUBECONFIG pointing at this Env.
func (e *Env) Shell(tb testing.TB, script string) (stdout string, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.Kubeconfig, "PATH="+e.AssetsDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECACHEDIR="+filepath.Join(e.Dir, "kubectl-cache"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("bash -c %q: %w: %s", script, err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

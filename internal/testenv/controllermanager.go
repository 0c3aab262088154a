package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// stopGracePeriod is how long kube-controller-manager gets to exit after SIGTERM
	// before it is killed.
	stopGracePeriod = 10 * time.Second

	// PortAttempts bounds the retries when another process takes the free port we
	// picked between closing our probe listener and kube-controller-manager binding it.
	PortAttempts = 3
)

// ControllerManager is a kube-controller-manager child process attached to an Env.
type ControllerManager struct {
	// URL is its secure serving endpoint (https://127.0.0.1:<port>), serving /healthz
	// and /metrics with a self-signed certificate.
	URL string
	*Process
}

// StartControllerManager starts <assets>/kube-controller-manager against e's apiserver
// with every controller enabled, waits until it serves /healthz with its controllers
// registered, and stops it in tb.Cleanup (SIGTERM, then SIGKILL after a grace period).
// Start calls it when Options.ControllerManager is set; call it yourself to attach the
// controllers later, or only for a subtest (pass the subtest's tb).
//
// The flags, which Options.ControllerManagerFlags override:
//
//   - --controllers=*: garbage collector, deployment, replicaset, endpointslice,
//     disruption (PodDisruptionBudget status), namespace, serviceaccount... all the
//     controllers that run by default in a cluster.
//   - --kubeconfig for a user in system:masters, with --use-service-account-credentials=false
//     so that every controller uses it instead of per-controller service-account tokens.
//   - --service-account-private-key-file: envtest's service-account signing key, so the
//     token controller works and signs tokens the apiserver accepts.
//   - --leader-elect=false, --bind-address=127.0.0.1, --secure-port=<free port>,
//     --cert-dir under Env.Dir, and anonymous access to /healthz, /readyz, /livez and
//     /metrics (--authorization-always-allow-paths).
func (e *Env) StartControllerManager(tb testing.TB) *ControllerManager {
	tb.Helper()
	if e.ControllerManager != nil {
		tb.Fatalf("testenv: kube-controller-manager is already running (%s)", e.ControllerManager.URL)
	}
	if err := checkBinaries(e.AssetsDir, os.Getenv(assetsEnv) != "", kubeControllerManager); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	kubeconfig := e.writeControllerManagerKubeconfig(tb)
	log := e.createLog(tb, kubeControllerManager)

	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("testenv: finding a free port for kube-controller-manager: %v", err)
		}
		proc, err := StartProcess(kubeControllerManager, filepath.Join(e.AssetsDir, kubeControllerManager),
			e.controllerManagerArgs(kubeconfig, port), nil, log)
		if err != nil {
			tb.Fatalf("testenv: %v", err)
		}
		cm := &ControllerManager{URL: "https://127.0.0.1:" + strconv.Itoa(port), Process: proc}
		tb.Cleanup(func() { cm.Stop(tb, stopGracePeriod) })

		err = cm.waitHealthy(e.startTimeout())
		if err == nil {
			e.ControllerManager = cm
			break
		}
		if attempt < PortAttempts && cm.lostPortRace() {
			tb.Logf("testenv: kube-controller-manager could not bind port %d, retrying with another", port)
			continue
		}
		tb.Fatalf("testenv: kube-controller-manager did not become healthy: %v\nlast lines of %s:\n%s",
			err, cm.LogFile, tailFile(cm.LogFile, tailLines))
	}
	tb.Cleanup(func() { e.ControllerManager = nil })
	return e.ControllerManager
}

// writeControllerManagerKubeconfig provisions an admin user for kube-controller-manager
// and writes its kubeconfig. A user of its own shows the controllers' requests as
// system:kube-controller-manager in the apiserver's logs and audit.
func (e *Env) writeControllerManagerKubeconfig(tb testing.TB) string {
	tb.Helper()
	user, err := e.Environment.ControlPlane.AddUser(envtest.User{
		Name:   "system:kube-controller-manager",
		Groups: []string{"system:masters"},
	}, nil)
	if err != nil {
		tb.Fatalf("testenv: provisioning the kube-controller-manager user: %v", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		tb.Fatalf("testenv: building the kube-controller-manager kubeconfig: %v", err)
	}
	path := filepath.Join(e.Dir, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatalf("testenv: writing the kube-controller-manager kubeconfig: %v", err)
	}
	return path
}

// controllerManagerArgs renders the default flags merged with Options.ControllerManagerFlags,
// sorted so that the command line is stable across runs.
func (e *Env) controllerManagerArgs(kubeconfig string, port int) []string {
	flags := map[string]string{
		"kubeconfig": kubeconfig,
		// No --authentication-kubeconfig: delegated authentication wants the apiserver's
		// request-header CA, which envtest does not configure, and logs errors about it
		// every second. Anonymous access to the health and metrics paths is enough on a
		// loopback port that lives as long as a test.
		"authorization-always-allow-paths": "/healthz,/readyz,/livez,/metrics",
		"controllers":                      "*",
		"use-service-account-credentials":  "false",
		"service-account-private-key-file": filepath.Join(
			e.Environment.ControlPlane.APIServer.CertDir, "sa-signer.key"),
		"leader-elect": "false",
		"bind-address": "127.0.0.1",
		"secure-port":  strconv.Itoa(port),
		"cert-dir":     filepath.Join(e.Dir, kubeControllerManager),
		// Level 2 logs what the garbage collector and the workload controllers decide,
		// which is what one reads after a failure.
		"v": "2",
	}
	for name, value := range e.opts.ControllerManagerFlags {
		flags[name] = value
	}
	args := make([]string, 0, len(flags))
	for name, value := range flags {
		args = append(args, "--"+name+"="+value)
	}
	sort.Strings(args)
	return args
}

// waitHealthy polls /healthz?verbose until it answers 200 and lists a check besides
// "ping": the server comes up before the controllers are built, answering with the ping
// check alone, and the controllers' checks are registered all at once when they have
// been built, just before they start. It fails early if the process exits.
func (cm *ControllerManager) waitHealthy(timeout time.Duration) error {
	httpClient := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			// The serving certificate is self-signed and the connection is loopback.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health check
		},
	}
	defer httpClient.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	last := "no answer yet"
	for {
		select {
		case <-cm.exited:
			return fmt.Errorf("it exited (%w)", cm.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("no healthy /healthz after %s; last answer: %s", timeout, last)
		case <-ticker.C:
		}
		healthy, answer := cm.probe(ctx, httpClient)
		if healthy {
			return nil
		}
		last = answer
	}
}

// probe asks /healthz?verbose once and says whether the answer means ready.
func (cm *ControllerManager) probe(ctx context.Context, httpClient *http.Client) (healthy bool, answer string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cm.URL+"/healthz?verbose", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	answer = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	return resp.StatusCode == http.StatusOK && listsControllerChecks(string(body)), answer
}

// listsControllerChecks reports whether a verbose healthz answer lists a passed check
// other than the default ping, i.e. a check registered for a controller.
func listsControllerChecks(body string) bool {
	for line := range strings.Lines(body) {
		if name, ok := strings.CutPrefix(line, "[+]"); ok && !strings.HasPrefix(name, "ping ") {
			return true
		}
	}
	return false
}

// lostPortRace reports whether the process exited because its port was taken.
func (cm *ControllerManager) lostPortRace() bool {
	select {
	case <-cm.exited:
	default:
		return false
	}
	return cm.LogContains("address already in use")
}

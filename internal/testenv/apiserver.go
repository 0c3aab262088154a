package testenv

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// apiserverStopGrace is how long a further kube-apiserver gets to exit after SIGTERM.
const apiserverStopGrace = 30 * time.Second

// APIServer is a further kube-apiserver of an Env's control plane (StartAPIServer): an HA
// control plane of several instances on one etcd.
type APIServer struct {
	*Process
	// BindAddress is the loopback address it serves on, at the first instance's secure port.
	BindAddress string
	// AdvertiseAddress is the address it registers in the endpoints of Service
	// default/kubernetes.
	AdvertiseAddress string
	// Config is Env.Config aimed at this instance.
	Config *rest.Config
}

// StartAPIServer starts one more kube-apiserver on e's etcd, serving at bindAddress (a
// loopback address other than the first instance's 127.0.0.1, such as 127.0.0.2) on the
// first instance's secure port, with its certificates and keys: its serving certificate
// (verified for the first instance's name, 127.0.0.1), client CA and service-account keys,
// so that the same credentials and tokens work on both. It returns once the instance is
// ready and stops it in tb.Cleanup (after a SIGCONT, should the test have left it stopped).
//
// Instances share the kubernetes Service's endpoints only with one port and distinct
// advertise addresses, and the endpoints refuse loopback addresses (Endpoints validation), so
// every instance must advertise a non-loopback address nothing serves on: advertiseAddress
// here, and Options.APIServerFlags["advertise-address"] for the first one (e.g. 198.51.100.1
// and .2, TEST-NET-2). AdvertisedConfig reaches the instances at those addresses.
//
// The instances share the hostname, hence one identity lease (kube-system apiserver-...),
// which both renew; nothing this package starts reads it.
func (e *Env) StartAPIServer(tb testing.TB, bindAddress, advertiseAddress string) *APIServer {
	tb.Helper()
	first := e.Environment.ControlPlane.APIServer
	firstAdvertise := e.opts.APIServerFlags["advertise-address"]
	for _, a := range []string{firstAdvertise, advertiseAddress} {
		if ip := net.ParseIP(a); ip == nil || ip.IsLoopback() {
			tb.Fatalf("testenv: StartAPIServer needs non-loopback advertise addresses, for this instance and in Options.APIServerFlags[\"advertise-address\"] for the first one (got %q, %q)", firstAdvertise, advertiseAddress)
		}
	}
	if ip := net.ParseIP(bindAddress); ip == nil || !ip.IsLoopback() || bindAddress == first.Address {
		tb.Fatalf("testenv: StartAPIServer binds to a loopback address other than the first instance's %s, got %q", first.Address, bindAddress)
	}
	clientCA := first.Configure().Get("client-ca-file").Get(nil)
	if len(clientCA) != 1 {
		tb.Fatalf("testenv: the first kube-apiserver has client-ca-file %q, want one file", clientCA)
	}
	port := first.Port
	certDir := filepath.Join(e.Dir, kubeAPIServer+"-"+bindAddress)
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		tb.Fatalf("testenv: %v", err)
	}

	// The flags envtest gives the first instance (controlplane.APIServer's defaultArgs in
	// controller-runtime v0.25), pointing at its files, then Options.APIServerFlags as there.
	flags := map[string]string{
		"etcd-servers":                     e.Environment.ControlPlane.Etcd.URL.String(),
		"cert-dir":                         certDir, // unused with the files below; keeps it away from /var/run/kubernetes
		"tls-cert-file":                    filepath.Join(first.CertDir, "apiserver.crt"),
		"tls-private-key-file":             filepath.Join(first.CertDir, "apiserver.key"),
		"client-ca-file":                   clientCA[0],
		"service-account-issuer":           "https://" + net.JoinHostPort(first.Address, port) + "/",
		"service-account-key-file":         filepath.Join(first.CertDir, "sa-signer.crt"),
		"service-account-signing-key-file": filepath.Join(first.CertDir, "sa-signer.key"),
		"service-cluster-ip-range":         "10.0.0.0/24",
		"allow-privileged":                 "true",
		"disable-admission-plugins":        "ServiceAccount",
		"authorization-mode":               "RBAC",
	}
	for name, value := range e.opts.APIServerFlags {
		flags[name] = value
	}
	flags["secure-port"], flags["bind-address"], flags["advertise-address"] = port, bindAddress, advertiseAddress
	args := make([]string, 0, len(flags))
	for name, value := range flags {
		args = append(args, "--"+name+"="+value)
	}
	sort.Strings(args)

	name := kubeAPIServer + "-" + bindAddress
	proc, err := StartProcess(name, filepath.Join(e.AssetsDir, kubeAPIServer), args, nil, e.createLog(tb, name))
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	s := &APIServer{Process: proc, BindAddress: bindAddress, AdvertiseAddress: advertiseAddress, Config: rest.CopyConfig(e.Config)}
	tb.Cleanup(func() {
		_ = s.Signal(syscall.SIGCONT)
		s.Stop(tb, apiserverStopGrace)
	})
	s.Config.Host = "https://" + net.JoinHostPort(bindAddress, port)
	s.Config.ServerName = first.Address

	if err := s.waitReady(e.readyTimeout()); err != nil {
		tb.Fatalf("testenv: %s did not become ready: %v\nlast lines of %s:\n%s", name, err, s.LogFile, tailFile(s.LogFile, tailLines))
	}
	if e.advertised == nil {
		e.advertised = map[string]string{net.JoinHostPort(firstAdvertise, port): net.JoinHostPort(first.Address, port)}
	}
	e.advertised[net.JoinHostPort(advertiseAddress, port)] = net.JoinHostPort(bindAddress, port)
	return s
}

// AdvertisedConfig is Env.Config whose connections to an instance's advertise address go to
// its bind address: what a network routing the advertise addresses to the instances would
// do, so that clients can use the addresses the instances register in the kubernetes
// Service's endpoints. Call it after StartAPIServer.
func (e *Env) AdvertisedConfig() *rest.Config {
	routes := make(map[string]string, len(e.advertised))
	maps.Copy(routes, e.advertised)
	cfg := rest.CopyConfig(e.Config)
	var d net.Dialer
	cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		if to, ok := routes[address]; ok {
			address = to
		}
		return d.DialContext(ctx, network, address)
	}
	return cfg
}

// readyTimeout is the start timeout for what this package waits for itself.
func (e *Env) readyTimeout() time.Duration {
	if t := e.startTimeout(); t > 0 {
		return t
	}
	if t, err := time.ParseDuration(os.Getenv(envStartTimeout)); err == nil && t > 0 {
		return t
	}
	return defaultStartTimeout
}

// waitReady polls /readyz (every post-start hook done: the CRD informer synced, the
// endpoints reconciled) until it answers 200; it fails early if the process exits.
func (s *APIServer) waitReady(timeout time.Duration) error {
	cfg := rest.CopyConfig(s.Config)
	cfg.Timeout = 5 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := "no answer yet"
	for {
		select {
		case <-s.Exited():
			return fmt.Errorf("it exited (%w)", s.ExitErr())
		case <-ctx.Done():
			return fmt.Errorf("no ready /readyz after %s; last answer: %s", timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Config.Host+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = resp.Status
	}
}

package cabundle

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Keys of the Secrets: cert-manager's (and cainjector's) names.
const (
	KeyCA   = "ca.crt"
	KeyCert = "tls.crt"
	// KeyOnceIssued, in the bundle Secret, lists the fingerprints of the CAs of the bundle
	// once named by the serving Secret, one per line.
	KeyOnceIssued = "once-issued.sha256"
)

// Maintainer keeps the bundle Secret's ca.crt as Plan decides, polling every Interval; it is
// a controller-runtime Runnable that runs on the elected leader only (one writer).
type Maintainer struct {
	// Reader reads the Secrets and EndpointSlices uncached (the manager's API reader): the
	// manager caches no Secret, and RBAC grants them by name only.
	Reader client.Reader
	Writer client.Writer
	// Namespace holds both Secrets and the Service.
	Namespace string
	// ServingSecret is the serving Certificate's Secret; BundleSecret the one cainjector
	// injects from (the chart creates it, annotated cert-manager.io/allow-direct-injection).
	ServingSecret, BundleSecret string
	// Service is the webhook Service; its EndpointSlices name every replica, each asked over
	// TLS which certificate it serves.
	Service string
	// ServerName is sent in the TLS handshake (the name the apiserver dials).
	ServerName  string
	Interval    time.Duration
	DialTimeout time.Duration
	// DialContext opens the TCP connection to an endpoint; nil is a net.Dialer's. (Tests
	// route documentation addresses to loopback, which an EndpointSlice may not hold.)
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// OnPlan, when set, observes every plan (metrics).
	OnPlan func(bundle []*x509.Certificate)
}

// NeedLeaderElection: one writer of the bundle.
func (m *Maintainer) NeedLeaderElection() bool { return true }

// Start runs Sync every Interval until ctx ends; failures are logged and retried.
func (m *Maintainer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("ca-bundle").WithValues("secret", m.Namespace+"/"+m.BundleSecret)
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	var lastErr string
	for {
		err := m.Sync(ctx, log)
		if ctx.Err() != nil {
			return nil // stopping (leadership lost or shutdown): a cancelled read is not news
		}
		if err != nil && err.Error() != lastErr {
			log.Error(err, "cannot maintain the CA bundle; retrying")
			lastErr = err.Error()
		} else if err == nil {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sync reads the state, plans and writes the bundle when it changes.
func (m *Maintainer) Sync(ctx context.Context, log logr.Logger) error {
	serving := &corev1.Secret{}
	if err := m.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.ServingSecret}, serving); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("the serving Secret %s/%s does not exist yet (cert-manager issues it)", m.Namespace, m.ServingSecret)
		}
		return fmt.Errorf("read the serving Secret: %w", err)
	}
	issuedCAs, err := Parse(serving.Data[KeyCA])
	if err != nil {
		return fmt.Errorf("the serving Secret's %s: %w", KeyCA, err)
	}
	if len(issuedCAs) == 0 {
		return fmt.Errorf("the serving Secret %s/%s has no %s: its issuer must publish its CA (cert-manager's CA, Vault and self-signed issuers do; ACME does not and cannot sign webhook certificates)", m.Namespace, m.ServingSecret, KeyCA)
	}
	issued, err := Parse(serving.Data[KeyCert])
	if err != nil {
		return fmt.Errorf("the serving Secret's %s: %w", KeyCert, err)
	}
	bundleSecret := &corev1.Secret{}
	if err := m.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.BundleSecret}, bundleSecret); err != nil {
		return fmt.Errorf("read the CA bundle Secret (the chart creates it): %w", err)
	}
	bundle, err := Parse(bundleSecret.Data[KeyCA])
	if err != nil {
		// Not ours to guess at: start again from the issued CA, which is what cainjector
		// would inject without the overlap.
		log.Error(err, "the CA bundle is unreadable; starting it again from the serving Secret's CA")
		bundle = nil
	}
	served, err := m.served(ctx)
	if err != nil {
		return err
	}
	s := State{Bundle: bundle, IssuedCAs: issuedCAs, Issued: issued, Served: served, OnceIssued: readOnceIssued(bundleSecret.Data, bundle), Now: time.Now()}
	next, added, removed := Plan(s)
	if m.OnPlan != nil {
		m.OnPlan(next)
	}
	encoded, onceIssued := Encode(next), encodeOnceIssued(s, next)
	if bytes.Equal(encoded, bundleSecret.Data[KeyCA]) && bytes.Equal(onceIssued, bundleSecret.Data[KeyOnceIssued]) {
		return nil
	}
	if bundleSecret.Data == nil {
		bundleSecret.Data = map[string][]byte{}
	}
	bundleSecret.Data[KeyCA], bundleSecret.Data[KeyOnceIssued] = encoded, onceIssued
	if err := m.Writer.Update(ctx, bundleSecret); err != nil {
		return fmt.Errorf("write the CA bundle: %w", err)
	}
	for _, c := range added {
		log.Info("CA added to the bundle", "ca", Describe(c.CA), "reason", c.Reason)
	}
	for _, c := range removed {
		log.Info("CA removed from the bundle", "ca", Describe(c.CA), "reason", c.Reason)
	}
	for _, ca := range next {
		if !contains(issuedCAs, ca) {
			log.Info("previous CA kept in the bundle", "ca", Describe(ca), "because", Kept(s, ca))
		}
	}
	return nil
}

// readOnceIssued is the bundle Secret's record of the CAs once issued. A bundle written before
// the record existed trusts what it holds, once (the record starts from it).
func readOnceIssued(data map[string][]byte, bundle []*x509.Certificate) map[string]bool {
	record, ok := data[KeyOnceIssued]
	if !ok && !enforceOnceIssued {
		return nil
	}
	seen := map[string]bool{}
	if !ok {
		for _, ca := range bundle {
			seen[Fingerprint(ca)] = true
		}
	}
	for line := range strings.Lines(string(record)) {
		if fp := strings.TrimSpace(line); fp != "" {
			seen[fp] = true
		}
	}
	return seen
}

// encodeOnceIssued records, of the next bundle, the CAs once issued: those recorded before
// and those the serving Secret names now.
func encodeOnceIssued(s State, next []*x509.Certificate) []byte {
	var b strings.Builder
	for _, ca := range next {
		if s.onceIssued(ca) {
			b.WriteString(Fingerprint(ca) + "\n")
		}
	}
	return []byte(b.String())
}

// enforceOnceIssued and onlyControllerSlices are the protections against a planted CA; tests
// turn them off as their negative control.
var (
	enforceOnceIssued    = true
	onlyControllerSlices = true
)

// endpointSliceController is the managed-by label of the slices the EndpointSlice controller
// writes from the Service's selector: a slice anyone else wrote may name any server.
const endpointSliceController = "endpointslice-controller.k8s.io"

// served asks every endpoint of the Service, ready or not (terminating ones aside), for the chain
// it presents; only the EndpointSlice controller's slices count.
func (m *Maintainer) served(ctx context.Context) ([]Served, error) {
	slices := &discoveryv1.EndpointSliceList{}
	labels := client.MatchingLabels{discoveryv1.LabelServiceName: m.Service}
	if onlyControllerSlices {
		labels[discoveryv1.LabelManagedBy] = endpointSliceController
	}
	if err := m.Reader.List(ctx, slices, client.InNamespace(m.Namespace), labels); err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service %s: %w", m.Service, err)
	}
	var out []Served
	seen := map[string]bool{}
	for _, es := range slices.Items {
		if len(es.Ports) == 0 || es.Ports[0].Port == nil {
			continue
		}
		port := strconv.Itoa(int(*es.Ports[0].Port))
		for _, ep := range es.Endpoints {
			// A terminating replica takes no new connection (its endpoint left the Service),
			// and the apiserver's open ones keep the chain they were set up with. Dialling it
			// would also keep its connection drain from ever seeing a quiet moment.
			if ptr.Deref(ep.Conditions.Terminating, false) {
				continue
			}
			for _, addr := range ep.Addresses {
				hostPort := net.JoinHostPort(addr, port)
				if seen[hostPort] {
					continue
				}
				seen[hostPort] = true
				chain, err := m.dial(ctx, hostPort)
				out = append(out, Served{Endpoint: hostPort, Chain: chain, Err: err})
			}
		}
	}
	return out, nil
}

// dial completes a TLS handshake with one replica and returns the chain it presented; trust is
// not judged (the question is which CA it chains to, not whether we trust it).
func (m *Maintainer) dial(ctx context.Context, hostPort string) ([]*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, m.DialTimeout)
	defer cancel()
	dial := m.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, "tcp", hostPort)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	conn := tls.Client(raw, &tls.Config{ServerName: m.ServerName, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // reads the chain, trusts nothing
	if err := conn.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates, nil
}

package manager

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/widgetry/widget-operator/internal/certtrust"
)

// certificatePollInterval is how often the mounted certificate files are read: the kubelet
// swaps a Secret volume's files atomically, so a read sees the old pair or the new one.
const certificatePollInterval = time.Second

// admitFunc is the reload gate: it says whether a renewed chain may replace the one served
// now, and if not, why.
type admitFunc func(ctx context.Context, candidate *tls.Certificate) (ok bool, reason string)

// servingCertificate loads the webhook's serving certificate from a directory and reloads it
// when the files change (cert-manager renews it in the mounted Secret). Until a certificate
// is loaded, handshakes fail and the readiness check reports why, so no traffic is routed to
// a replica that cannot serve it.
//
// A renewed certificate passes the gate (admit) before it is served: when its issuer is a new
// CA that the caBundles the apiserver verifies with do not hold yet, serving it would fail
// every call routed here (x509: certificate signed by unknown authority) until cainjector
// catches up. The replica keeps serving the certificate it has, which the apiserver still
// trusts, and swaps the moment the bundles trust the new one.
type servingCertificate struct {
	certPath, keyPath string
	admit             admitFunc // nil: every renewal is served at once

	mu       sync.RWMutex
	current  *tls.Certificate
	certPEM  []byte // the files current was loaded from
	keyPEM   []byte
	held     *tls.Certificate // a renewal the gate holds back; nil when none
	heldPEM  []byte
	lastErr  error
	interval time.Duration
}

func newServingCertificate(dir, certName, keyName string) *servingCertificate {
	return &servingCertificate{certPath: filepath.Join(dir, certName), keyPath: filepath.Join(dir, keyName), interval: certificatePollInterval}
}

// Start loads the certificate, retrying until the files exist, then follows their changes
// through the gate until ctx ends.
func (s *servingCertificate) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithValues("cert", s.certPath)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.reload(ctx, log)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// reload reads the files and serves what they hold when it is new and the gate admits it.
func (s *servingCertificate) reload(ctx context.Context, log logr.Logger) {
	certPEM, certErr := os.ReadFile(s.certPath)
	keyPEM, keyErr := os.ReadFile(s.keyPath)
	s.mu.RLock()
	current, unchanged := s.current, bytes.Equal(certPEM, s.certPEM) && bytes.Equal(keyPEM, s.keyPEM)
	s.mu.RUnlock()
	if err := errors.Join(certErr, keyErr); err != nil {
		if current == nil {
			s.setErr(err)
			log.Info("waiting for the serving certificate", "error", err.Error())
		}
		return
	}
	if unchanged {
		s.hold(nil, nil)
		return
	}
	chain, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Mid-rotation a pair may not match for a moment; the next read settles it.
		if current == nil {
			s.setErr(err)
		}
		log.Info("the serving certificate files do not load", "error", err.Error())
		return
	}
	leaf, err := certtrust.Leaf(&chain)
	if err != nil {
		s.setErr(err)
		return
	}
	chain.Leaf = leaf
	if current != nil && s.admit != nil {
		if ok, reason := s.admit(ctx, &chain); !ok {
			if s.hold(&chain, certPEM) {
				log.Info("holding back the renewed serving certificate: the apiserver would refuse it; the current one is served until it does not",
					"serial", leaf.SerialNumber.Text(16), "issuer", leaf.Issuer.String(), "reason", reason)
			}
			return
		}
	}
	s.mu.Lock()
	s.current, s.certPEM, s.keyPEM, s.lastErr = &chain, certPEM, keyPEM, nil
	s.held, s.heldPEM = nil, nil
	s.mu.Unlock()
	log.Info("serving certificate loaded", "serial", leaf.SerialNumber.Text(16), "issuer", leaf.Issuer.String(),
		"notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
}

// hold records the renewal held back (nil: none) and reports whether it is a new one.
func (s *servingCertificate) hold(chain *tls.Certificate, certPEM []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := !bytes.Equal(certPEM, s.heldPEM)
	s.held, s.heldPEM = chain, certPEM
	return changed
}

func (s *servingCertificate) setErr(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// NeedLeaderElection: every replica serves webhooks.
func (s *servingCertificate) NeedLeaderElection() bool { return false }

// GetCertificate is the tls.Config hook.
func (s *servingCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.current == nil {
		return nil, fmt.Errorf("no serving certificate loaded yet from %s", s.certPath)
	}
	return s.current, nil
}

// Held is the renewed certificate the gate holds back, nil when none.
func (s *servingCertificate) Held() *tls.Certificate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.held
}

// Check is a readiness check: a certificate is loaded.
func (s *servingCertificate) Check(*http.Request) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.current != nil {
		return nil
	}
	if s.lastErr != nil {
		return fmt.Errorf("serving certificate not loaded: %w", s.lastErr)
	}
	return errors.New("serving certificate not loaded yet")
}

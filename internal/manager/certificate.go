package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// servingCertificate loads the webhook's serving certificate from a directory and reloads it
// when the files change (cert-manager renews it in the mounted Secret). Until a certificate
// is loaded, handshakes fail and the readiness check reports why, so no traffic is routed to
// a replica that cannot serve it.
type servingCertificate struct {
	certPath, keyPath string

	mu      sync.RWMutex
	watcher *certwatcher.CertWatcher
	lastErr error
}

func newServingCertificate(dir, certName, keyName string) *servingCertificate {
	return &servingCertificate{certPath: filepath.Join(dir, certName), keyPath: filepath.Join(dir, keyName)}
}

// Start loads the certificate, retrying until the files exist, then watches them.
func (s *servingCertificate) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithValues("cert", s.certPath, "key", s.keyPath)
	for {
		w, err := certwatcher.New(s.certPath, s.keyPath)
		if err == nil {
			s.mu.Lock()
			s.watcher, s.lastErr = w, nil
			s.mu.Unlock()
			log.Info("serving certificate loaded")
			return w.Start(ctx)
		}
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		log.Info("waiting for the serving certificate", "error", err.Error())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// NeedLeaderElection: every replica serves webhooks.
func (s *servingCertificate) NeedLeaderElection() bool { return false }

// GetCertificate is the tls.Config hook.
func (s *servingCertificate) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.RLock()
	w := s.watcher
	s.mu.RUnlock()
	if w == nil {
		return nil, fmt.Errorf("no serving certificate loaded yet from %s", s.certPath)
	}
	return w.GetCertificate(hello)
}

// Check is a readiness check: a certificate is loaded.
func (s *servingCertificate) Check(*http.Request) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.watcher != nil {
		return nil
	}
	if s.lastErr != nil {
		return fmt.Errorf("serving certificate not loaded: %w", s.lastErr)
	}
	return errors.New("serving certificate not loaded yet")
}

package serving

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// shutdownTimeout bounds how long a stopping server waits for its requests to finish.
const shutdownTimeout = 30 * time.Second

// NewServer binds addr now (so that a port in use fails the manager's setup, not its start)
// and returns the runnable serving handler on it within l, over TLS when tlsConfig is set.
func NewServer(name, addr string, l Limits, m *ListenerMetrics, tlsConfig *tls.Config, handler http.Handler) (*manager.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the %s server on %s: %w", name, addr, err)
	}
	capped := Listen(ln, name, l, m)
	if tlsConfig != nil {
		capped = tls.NewListener(capped, tlsConfig)
	}
	timeout := shutdownTimeout
	return &manager.Server{Name: name, Server: l.Server(handler), Listener: capped, ShutdownTimeout: &timeout}, nil
}

package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Timeouts of the webhook server. controller-runtime's server sets only a 32 s header timeout
// and allows 1 MiB of headers, so a client that trickles a request holds a goroutine and up
// to a megabyte for as long as it likes. Here a slow client is cut off once its request could
// no longer be useful: the apiserver gives a webhook call at most 30 s.
const (
	webhookReadHeaderTimeout = 10 * time.Second
	// webhookReadTimeout covers headers and body: a 64 MiB review from an in-cluster apiserver
	// arrives in well under a second, and a call still reading after 30 s has been given up.
	webhookReadTimeout = 30 * time.Second
	// webhookWriteTimeout runs from the end of the headers to the end of the answer: the
	// read, a wait for the in-flight budget and the conversion itself.
	webhookWriteTimeout = 45 * time.Second
	// webhookIdleTimeout is longer than the apiserver's 90 s idle timeout for webhook
	// connections, so the apiserver, not this server, closes an idle connection: a server
	// closing one the moment the client reuses it fails that request, and a POST is not
	// retried.
	webhookIdleTimeout   = 120 * time.Second
	webhookMaxHeaderSize = 64 << 10
)

// timedWebhookServer is controller-runtime's webhook server (its registration and its
// per-path metrics) served by an http.Server with the timeouts above, which keeps count of
// its connections for the drain (Quiesce).
type timedWebhookServer struct {
	crwebhook.Server
	port    int
	tlsOpts []func(*tls.Config)
	started atomic.Bool
	conns   connections
}

// connections counts the server's open connections and remembers when the last one came.
type connections struct {
	mu      sync.Mutex
	open    int
	lastNew time.Time
}

// track is the server's ConnState hook.
func (c *connections) track(_ net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		c.open++
		c.lastNew = time.Now()
	case http.StateClosed, http.StateHijacked:
		c.open--
	}
}

func (c *connections) snapshot() (open int, lastNew time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, c.lastNew
}

// Quiesce waits, while the server goes on serving, until no connection is open and none has
// come for quiet, or ctx ends; it returns how many connections are still open.
//
// It is the drain's last phase. The server never closes a kept-alive connection itself: in
// HTTP/1.1 it cannot tell the client, and a request the client sends on it the moment it
// closes fails (the apiserver does not retry a webhook POST). Each answer during the drain
// says "Connection: close", so a connection in use closes after its answer; an idle one is
// closed by the apiserver, 90 s after its last request at the latest. New connections still
// arrive while kube-proxy routes to the replica; the quiet period waits them out, so the
// process, and with it the pod's address, stays until nobody routes here.
func (s *timedWebhookServer) Quiesce(ctx context.Context, quiet time.Duration) int {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		open, lastNew := s.conns.snapshot()
		if open == 0 && time.Since(lastNew) >= quiet {
			return 0
		}
		select {
		case <-ctx.Done():
			return open
		case <-tick.C:
		}
	}
}

func newTimedWebhookServer(port int, tlsOpts ...func(*tls.Config)) *timedWebhookServer {
	return &timedWebhookServer{Server: crwebhook.NewServer(crwebhook.Options{Port: port}), port: port, tlsOpts: tlsOpts}
}

// Start serves until ctx ends, then shuts down within a minute, as controller-runtime's does.
func (s *timedWebhookServer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("webhook-server")
	cfg := &tls.Config{NextProtos: []string{"h2"}} // as controller-runtime's; TLSOptions turns HTTP/2 off
	for _, op := range s.tlsOpts {
		op(cfg)
	}
	listener, err := tls.Listen("tcp", net.JoinHostPort("", strconv.Itoa(s.port)), cfg)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.WebhookMux(),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: webhookReadHeaderTimeout,
		ReadTimeout:       webhookReadTimeout,
		WriteTimeout:      webhookWriteTimeout,
		IdleTimeout:       webhookIdleTimeout,
		MaxHeaderBytes:    webhookMaxHeaderSize,
		ConnState:         s.conns.track,
	}
	done := make(chan struct{})
	go func() { //nolint:gosec // G118: it runs after ctx has ended, so the shutdown needs a context of its own
		defer close(done)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			log.Error(err, "shutting down the webhook server")
		}
	}()
	log.Info("serving webhooks", "port", s.port, "readHeaderTimeout", webhookReadHeaderTimeout, "readTimeout", webhookReadTimeout,
		"writeTimeout", webhookWriteTimeout, "idleTimeout", webhookIdleTimeout)
	s.started.Store(true)
	if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-done
	return nil
}

// StartedChecker is ready once the server accepts TLS connections.
func (s *timedWebhookServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		if !s.started.Load() {
			return errors.New("webhook server has not been started yet")
		}
		d := &net.Dialer{Timeout: 10 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort("localhost", strconv.Itoa(s.port)), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a reachability probe of our own port
		if err != nil {
			return fmt.Errorf("webhook server is not reachable: %w", err)
		}
		return conn.Close()
	}
}

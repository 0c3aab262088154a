package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/widgetry/widget-operator/internal/serving"
)

// webhookLimits bound the webhook server. controller-runtime's server sets only a 32 s header
// timeout and allows 1 MiB of headers, so a client that trickles a request holds a goroutine
// and up to a megabyte for as long as it likes. Here a slow client is cut off once its request
// could no longer be useful: the apiserver gives a webhook call at most 30 s.
//   - ReadTimeout covers headers and body: a 64 MiB review from an in-cluster apiserver
//     arrives in well under a second, and a call still reading after 30 s has been given up.
//   - WriteTimeout runs from the end of the headers to the end of the answer: the read, a wait
//     for the in-flight budget and the conversion itself.
//   - IdleTimeout is longer than the apiserver's 90 s idle timeout for webhook connections, so
//     the apiserver, not this server, closes an idle connection: a server closing one the
//     moment the client reuses it fails that request, and a POST is not retried.
//   - The apiserver's headers are a few hundred bytes (a few KiB with a bearer token of its
//     own): 16 KiB is plenty.
//   - Connections: the apiserver opens one per request in flight to this replica, and its
//     own in-flight limits (400 reads, 200 writes by default, per instance) bound those; a
//     source past 512 is not one apiserver (where several reach us through one address, a
//     konnectivity agent or NAT, raise --webhook-max-connections-per-source). 1024
//     connections trickling their headers are cut off within 10 s and hold about 40 MiB
//     meanwhile, outside the in-flight budget, within the fifth of the memory limit it leaves.
var webhookLimits = serving.Limits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       30 * time.Second,
	WriteTimeout:      45 * time.Second,
	IdleTimeout:       120 * time.Second,
	MaxHeaderBytes:    16 << 10,
	MaxConns:          1024,
	MaxConnsPerSource: 512,
}

// timedWebhookServer is controller-runtime's webhook server (its registration and its
// per-path metrics) served by an http.Server with the timeouts above, which keeps count of
// its connections for the drain (Quiesce).
type timedWebhookServer struct {
	crwebhook.Server
	port      int
	limits    serving.Limits
	tlsOpts   []func(*tls.Config)
	listeners *serving.ListenerMetrics
	serving   atomic.Bool
	conns     connections
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

func newTimedWebhookServer(port int, limits serving.Limits, listeners *serving.ListenerMetrics, tlsOpts ...func(*tls.Config)) *timedWebhookServer {
	return &timedWebhookServer{Server: crwebhook.NewServer(crwebhook.Options{Port: port}), port: port, limits: limits, listeners: listeners, tlsOpts: tlsOpts}
}

// Start serves until ctx ends, then shuts down within a minute, as controller-runtime's does.
func (s *timedWebhookServer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("webhook-server")
	cfg := &tls.Config{NextProtos: []string{"h2"}} // as controller-runtime's; TLSOptions turns HTTP/2 off
	for _, op := range s.tlsOpts {
		op(cfg)
	}
	raw, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(s.port)))
	if err != nil {
		return err
	}
	listener := tls.NewListener(serving.Listen(raw, "webhook", s.limits, s.listeners), cfg)
	srv := s.limits.Server(s.WebhookMux())
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.ConnState = s.conns.track
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
	log.Info("serving webhooks", "port", s.port, "limits", s.limits)
	s.serving.Store(true)
	err = srv.Serve(listener)
	s.serving.Store(false)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-done
	return nil
}

// ServingChecker is ready while the server's accept loop runs. It does not dial the server: a
// TLS handshake is CPU-bound, and under a CPU flood a dial that times out would take a replica
// that still serves out of the Service, and with it, replica by replica, every webhook.
func (s *timedWebhookServer) ServingChecker() healthz.Checker {
	return func(*http.Request) error {
		if !s.serving.Load() {
			return errors.New("the webhook server is not serving: not started yet, or stopped")
		}
		return nil
	}
}

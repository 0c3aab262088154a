package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// socketMetricsServer serves the process's metrics in the text format on a Unix socket, for
// the webhook container of the same pod to re-export (widgetmetrics.RemoteCollector): the
// socket lives in a volume only the pod's containers mount, so it needs no authentication of
// its own, and the pod keeps one scrape target behind authentication and authorization.
type socketMetricsServer struct{ path string }

// NeedLeaderElection: every replica's controller process has metrics, leader or standby.
func (s *socketMetricsServer) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *socketMetricsServer) Start(ctx context.Context) error {
	// A socket left by a killed predecessor in the same volume would make Listen fail.
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the stale metrics socket: %w", err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "unix", s.path)
	if err != nil {
		return fmt.Errorf("listen on the metrics socket: %w", err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}),
		ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		// ctx has ended; the shutdown gets its own bound.
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

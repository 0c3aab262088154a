package manager

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/flowcontrol"
)

// Metric names of the controller's supervisor.
const (
	ControllerRunningName  = "widget_controller_running"
	ControllerFailuresName = "widget_controller_failures_total"
)

// Backoff between attempts to run the controller: doubling from the first to the cap, and
// back to the first once an attempt has run for resetAfter.
const (
	firstBackoff = time.Second
	maxBackoff   = time.Minute
	resetAfter   = 2 * time.Minute
)

// controllerMetrics report whether this replica runs the controller and why it failed.
type controllerMetrics struct {
	running  prometheus.Gauge
	failures *prometheus.CounterVec
}

// RegisterControllerMetrics registers widget_controller_running and
// widget_controller_failures_total on reg (the metric catalogue's test reads them too).
func RegisterControllerMetrics(reg prometheus.Registerer) error {
	_, err := newControllerMetrics(reg)
	return err
}

func newControllerMetrics(reg prometheus.Registerer) (*controllerMetrics, error) {
	m := &controllerMetrics{
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: ControllerRunningName,
			Help: "1 while this replica runs the Widget controller (leading or standing by for the lease), 0 while it is set up again after a failure."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ControllerFailuresName,
			Help: "Times the Widget controller could not be set up (stage setup: CRD missing, unknown storage version, RBAC) or stopped on its own (stage run: lease lost, caches that never sync); each is retried with backoff."},
			[]string{"stage"}),
	}
	for _, c := range []prometheus.Collector{m.running, m.failures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Both series exist from the start, so rate() and the alert see the first failure.
	m.failures.WithLabelValues("setup")
	m.failures.WithLabelValues("run")
	return m, nil
}

// starter is what superviseController runs: a controller manager.
type starter interface{ Start(context.Context) error }

// newControllerBackoff is the backoff between attempts to run the controller.
func newControllerBackoff() *flowcontrol.Backoff {
	return flowcontrol.NewBackOff(firstBackoff, maxBackoff)
}

// superviseController runs the controller until ctx ends. build sets up a fresh controller
// manager (new caches, a new attempt at the lease); when it fails, or the manager stops on
// its own, the failure is logged and counted and the controller is built again after a
// backoff. The webhook server, which every replica serves whatever the controller does, never
// waits on it: a controller that cannot start must not crash-loop the pod and take the
// webhooks down with it. It returns when ctx ends, with the last manager stopped (its lease
// released).
func superviseController(ctx context.Context, log logr.Logger, m *controllerMetrics, backoff *flowcontrol.Backoff, build func() (starter, error)) {
	const id = "controller"
	for {
		stage, started := "setup", time.Now()
		mgr, err := build()
		if err == nil {
			stage = "run"
			m.running.Set(1)
			err = mgr.Start(ctx)
			m.running.Set(0)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the controller manager stopped without an error")
		}
		if time.Since(started) > resetAfter {
			backoff.Reset(id)
		}
		backoff.Next(id, backoff.Clock.Now())
		wait := backoff.Get(id)
		m.failures.WithLabelValues(stage).Inc()
		log.Error(err, "the Widget controller failed; the webhooks keep serving, retrying", "stage", stage, "retryIn", wait,
			"runbook", "runbooks/alerts/WidgetControllerNotRunning.md")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

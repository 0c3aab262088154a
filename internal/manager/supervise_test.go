package manager

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/util/flowcontrol"
)

// startFunc is a starter.
type startFunc func(context.Context) error

func (f startFunc) Start(ctx context.Context) error { return f(ctx) }

// TestSuperviseControllerRetries: a controller that cannot be set up (twice), then one that
// stops on its own (a lost lease), is built again each time with backoff, each failure counted
// by stage, until one runs; the supervisor returns only when its context ends, with the
// running controller stopped.
func TestSuperviseControllerRetries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := newControllerMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var builds atomic.Int32
	running := make(chan struct{})
	stopped := make(chan struct{})
	build := func() (starter, error) {
		switch builds.Add(1) {
		case 1, 2:
			return nil, errors.New(`read CRD widgets.widgetry.io: customresourcedefinitions "widgets.widgetry.io" not found`)
		case 3:
			return startFunc(func(context.Context) error { return errors.New("leader election lost") }), nil
		}
		return startFunc(func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			close(stopped)
			return nil
		}), nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		superviseController(ctx, logr.Discard(), m, flowcontrol.NewBackOff(time.Millisecond, 10*time.Millisecond), build)
	}()
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatalf("no controller running after %d builds", builds.Load())
	}
	if got := testutil.ToFloat64(m.running); got != 1 {
		t.Errorf("%s = %v while running, want 1", ControllerRunningName, got)
	}
	if setup, run := testutil.ToFloat64(m.failures.WithLabelValues("setup")), testutil.ToFloat64(m.failures.WithLabelValues("run")); setup != 2 || run != 1 {
		t.Errorf("failures setup=%v run=%v, want 2 and 1", setup, run)
	}
	select {
	case <-done:
		t.Fatal("the supervisor returned while its context was live")
	default:
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the supervisor did not return after its context ended")
	}
	select {
	case <-stopped:
	default:
		t.Error("the supervisor returned before the running controller stopped")
	}
	if got := testutil.ToFloat64(m.running); got != 0 {
		t.Errorf("%s = %v after the stop, want 0", ControllerRunningName, got)
	}
}

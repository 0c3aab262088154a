package widgetenv

import (
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/testenv"
)

// Reconciles is the manager's controller_runtime_reconcile_total for the Widget controller,
// every result summed, read from its /metrics with token.
func (m *Manager) Reconciles(tb testing.TB, token string) int {
	tb.Helper()
	total := 0
	for _, metric := range m.MetricFamilies(tb, token)["controller_runtime_reconcile_total"].GetMetric() {
		if testenv.Label(metric, "controller") == controller.Name {
			total += int(metric.GetCounter().GetValue())
		}
	}
	return total
}

// SettledReconciles waits for the reconcile count to hold still for 3 s, and returns it: the
// echoes of the controller's writes come within moments.
func (m *Manager) SettledReconciles(tb testing.TB, token string) int {
	tb.Helper()
	last, still := m.Reconciles(tb, token), 0
	for still < 6 {
		time.Sleep(500 * time.Millisecond)
		now := m.Reconciles(tb, token)
		if now == last {
			still++
		} else {
			last, still = now, 0
		}
	}
	return last
}

package webhook

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
)

// InFlightBudget bounds the memory that the webhook requests being handled at once may hold,
// process-wide. Each request is charged its body times the peak factor of its handler before
// its body is read; one that finds the budget spent waits a bounded time (FIFO, so a large
// review is not starved by small ones), then gets a clear 503 instead of taking the pod to
// its memory limit — and with it every Widget read, write and garbage collection that the
// webhooks serve cluster-wide.
type InFlightBudget struct {
	total    int64
	wait     time.Duration
	sem      *semaphore.Weighted
	inFlight prometheus.Gauge
	refused  *prometheus.CounterVec
}

// NewInFlightBudget allows total bytes in flight; requests wait at most wait for their share.
// Its metrics are registered with reg.
func NewInFlightBudget(total int64, wait time.Duration, reg prometheus.Registerer) (*InFlightBudget, error) {
	b := &InFlightBudget{
		total: total,
		wait:  wait,
		sem:   semaphore.NewWeighted(total),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "widget_webhook_inflight_bytes",
			Help: "Bytes of the webhook requests being handled, charged as body size times the handler's peak factor.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "widget_webhook_budget_refusals_total",
			Help: "Webhook requests refused (HTTP 503) because the in-flight memory budget stayed spent for the whole wait, by path.",
		}, []string{"path"}),
	}
	budget := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "widget_webhook_inflight_budget_bytes",
		Help: "The in-flight memory budget of the webhook server (from GOMEMLIMIT or --webhook-inflight-bytes).",
	})
	budget.Set(float64(total))
	for _, c := range []prometheus.Collector{b.inFlight, b.refused, budget} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Limit charges every request to next factor times its body, or factor times maxBody when
// the client does not say how long the body is. A nil budget limits nothing.
func (b *InFlightBudget) Limit(path string, factor float64, maxBody int64, next http.Handler) http.Handler {
	if b == nil {
		return next
	}
	b.refused.WithLabelValues(path) // exported at 0 from the start, so rate() sees the first refusal
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size := maxBody
		if r.ContentLength >= 0 && r.ContentLength < maxBody {
			size = r.ContentLength
		}
		// A request larger than the whole budget runs alone rather than never.
		charge := min(Charge(size, factor), b.total)
		ctx, cancel := context.WithTimeout(r.Context(), b.wait)
		err := b.sem.Acquire(ctx, charge)
		cancel()
		if err != nil {
			b.refused.WithLabelValues(path).Inc()
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("webhook busy: requests in flight held this replica's memory budget of %d bytes for %s, and this one needs %d; "+
				"refused so that the pod does not run out of memory (runbook: runbooks/alerts/WidgetWebhookBudgetRefusals.md)", b.total, b.wait, charge),
				http.StatusServiceUnavailable)
			return
		}
		b.inFlight.Add(float64(charge))
		defer func() {
			b.inFlight.Sub(float64(charge))
			b.sem.Release(charge)
		}()
		next.ServeHTTP(w, r)
	})
}

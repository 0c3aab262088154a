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
//
// Small requests — a single Widget's conversion on a GET or a watch event, an admission
// review — have a reserve of their own (SmallReserveShare of the budget): a flood of large
// reviews, from a LIST storm or a hostile client, makes large reviews wait, never the
// everyday traffic behind them in the queue.
type InFlightBudget struct {
	total    int64
	wait     time.Duration
	large    *semaphore.Weighted
	small    *semaphore.Weighted
	reserve  int64
	inFlight prometheus.Gauge
	refused  *prometheus.CounterVec
}

// SmallReserveShare is the part of the budget, in eighths, kept for small requests, and
// SmallCharge the largest charge that counts as small (a ConversionReview of about 400 KiB,
// some 250 Widgets).
const (
	SmallReserveShare = 1
	SmallCharge       = 1 << 20
)

// smallReserve is the part of a budget of total bytes kept for small requests; large ones
// share the rest.
func smallReserve(total int64) int64 {
	return max(total/8*SmallReserveShare, min(total, SmallCharge))
}

// NewInFlightBudget allows total bytes in flight; requests wait at most wait for their share.
// Its metrics are registered with reg.
func NewInFlightBudget(total int64, wait time.Duration, reg prometheus.Registerer) (*InFlightBudget, error) {
	reserve := smallReserve(total)
	b := &InFlightBudget{
		total:   total,
		wait:    wait,
		reserve: reserve,
		large:   semaphore.NewWeighted(max(total-reserve, 1)),
		small:   semaphore.NewWeighted(reserve),
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
		charge := Charge(size, factor)
		pool, poolSize := b.small, b.reserve
		if charge > SmallCharge {
			pool, poolSize = b.large, b.total-b.reserve
		}
		// A request larger than its whole pool runs alone rather than never.
		charge = min(charge, max(poolSize, 1))
		ctx, cancel := context.WithTimeout(r.Context(), b.wait)
		err := pool.Acquire(ctx, charge)
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
			pool.Release(charge)
		}()
		next.ServeHTTP(w, r)
	})
}

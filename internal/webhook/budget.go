package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// InFlightBudget bounds the memory that the webhook requests being handled at once may hold,
// process-wide. Each request is charged its body times the peak factor of its handler: the
// body as it arrives, the rest once it has arrived whole (budgetPool), so a client that
// declares a large body and sends it slowly, or not at all, holds only what it has sent. One
// that finds the budget spent waits a bounded time (in order of arrival, so a large review is
// not starved by small ones), then gets a clear 503 instead of taking the pod to its memory
// limit — and with it every Widget read, write and garbage collection that the webhooks
// serve cluster-wide.
//
// Small requests — a single Widget's conversion on a GET or a watch event, an admission
// review — have a reserve of their own (SmallReserveShare of the budget): a flood of large
// reviews, from a LIST storm or a hostile client, makes large reviews wait, never the
// everyday traffic behind them in the queue. The same holds for the CPU: large requests are
// handled at most GOMAXPROCS-1 at a time (one at least), so that small ones always find a
// processor free rather than queueing behind conversions of megabytes, within a CPU limit
// of half a core.
type InFlightBudget struct {
	total int64
	wait  time.Duration
	large *budgetPool
	small *budgetPool
	// largeWork holds a slot per large request being handled.
	largeWork chan struct{}
	inFlight  prometheus.Gauge
	refused   *prometheus.CounterVec
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
		total:     total,
		wait:      wait,
		large:     newBudgetPool(max(total-reserve, 1)),
		small:     newBudgetPool(reserve),
		largeWork: make(chan struct{}, max(runtime.GOMAXPROCS(0)-1, 1)),
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

// chargeAsBodiesArrive is the protection against clients that declare bodies they do not
// send; tests turn it off, as their negative control, to charge the declared size up front.
var chargeAsBodiesArrive = true

// Limit charges every request to next factor times its body (factor times maxBody while the
// client does not say how long the body is), and hands next the body read whole (ArrivedBody).
// A request declared larger than maxBody goes to next unread and uncharged: next refuses it.
// A nil budget limits nothing.
func (b *InFlightBudget) Limit(path string, factor float64, maxBody int64, next http.Handler) http.Handler {
	if b == nil {
		return next
	}
	b.refused.WithLabelValues(path) // exported at 0 from the start, so rate() sees the first refusal
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBody {
			next.ServeHTTP(w, r)
			return
		}
		size := maxBody
		if r.ContentLength >= 0 {
			size = r.ContentLength
		}
		pool := b.small
		if Charge(size, factor) > SmallCharge {
			pool = b.large
		}
		t := pool.open(Charge(size, factor))
		charged := int64(0)
		defer func() {
			pool.release(t)
			b.inFlight.Sub(float64(charged))
		}()
		// The request waits for the budget at most b.wait in all, over every piece of its body:
		// waits of a few seconds per piece would add up past the server's read timeout, and
		// the request would fail as a slow client's rather than get the budget's 503.
		waited := time.Duration(0)
		grow := func(n int64) bool {
			ctx, cancel := context.WithTimeout(r.Context(), b.wait-waited)
			defer cancel()
			before, start := t.held, time.Now()
			err := pool.grow(ctx, t, n)
			waited += time.Since(start)
			if err != nil {
				b.refused.WithLabelValues(path).Inc()
				w.Header().Set("Retry-After", "1")
				http.Error(w, fmt.Sprintf("webhook busy: requests in flight held this replica's memory budget of %d bytes for %s, and this one needs %d; "+
					"refused so that the pod does not run out of memory (runbook: runbooks/alerts/WidgetWebhookBudgetRefusals.md)", b.total, b.wait, t.need),
					http.StatusServiceUnavailable)
				return false
			}
			charged += t.held - before
			b.inFlight.Add(float64(t.held - before))
			return true
		}
		if !chargeAsBodiesArrive && !grow(t.need) {
			return
		}
		body, err := readArriving(r.Body, r.ContentLength, maxBody, grow)
		if err != nil {
			if !errors.Is(err, errBudgetRefused) {
				http.Error(w, fmt.Sprintf("read request body: %v", err), http.StatusBadRequest)
			}
			return
		}
		// The body has arrived: the rest of its charge before the handler parses it.
		if !grow(Charge(body.n, factor) - t.held) {
			return
		}
		if pool == b.large {
			release, ok := b.work(r, path, w)
			if !ok {
				return
			}
			defer release()
		}
		r.Body, r.ContentLength = body.assemble(r.Body), body.n
		next.ServeHTTP(w, r)
	})
}

// work takes a slot for handling a large request, waiting at most the budget's wait, and
// returns what gives it back. Refused, it answers 503.
func (b *InFlightBudget) work(r *http.Request, path string, w http.ResponseWriter) (func(), bool) {
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	select {
	case b.largeWork <- struct{}{}:
		return func() { <-b.largeWork }, true
	case <-timer.C:
	case <-r.Context().Done():
	}
	b.refused.WithLabelValues(path).Inc()
	w.Header().Set("Retry-After", "1")
	http.Error(w, fmt.Sprintf("webhook busy: large requests held this replica's %d processor(s) for large requests for %s; refused so that its CPU stays free for single objects (runbook: runbooks/alerts/WidgetWebhookBudgetRefusals.md)",
		cap(b.largeWork), b.wait), http.StatusServiceUnavailable)
	return nil, false
}

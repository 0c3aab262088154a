package webhook

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values are a closed set, so no request can grow the series count.
const (
	labelUnknown = "unknown"
	labelMixed   = "mixed"
	labelNone    = "none"

	resultSuccess = "success"
	resultFailure = "failure"
	resultError   = "error"

	reasonMalformed          = "MalformedRequest"
	reasonUnsupportedVersion = "UnsupportedVersion"
	// reasonInvalidData is a degradation, not a failure: widget_conversion_degraded_total.
	reasonInvalidData      = "InvalidConversionData"
	reasonConversionFailed = "ConversionFailed"
	reasonMethodNotAllowed = "MethodNotAllowed"
	reasonMediaType        = "UnsupportedMediaType"
	reasonBodyTooLarge     = "BodyTooLarge"
	reasonPanic            = "Panic"
)

// ConversionMetrics are the widget_conversion_* metrics. A nil *ConversionMetrics records
// nothing, which keeps benchmarks and unit tests free of registries.
type ConversionMetrics struct {
	requests  *prometheus.CounterVec
	converted *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	// reviewObjects and reviewBytes say what the apiserver sends: how many objects, and how
	// many bytes, one ConversionReview carries (a LIST page, a whole LIST, a watch event).
	reviewObjects prometheus.Histogram
	reviewBytes   prometheus.Histogram
	failures      *prometheus.CounterVec
	degraded      *prometheus.CounterVec
	panics        prometheus.Counter
}

// NewConversionMetrics creates the metrics and registers them with reg (for the manager:
// controller-runtime's metrics.Registry, so they are served next to its own).
func NewConversionMetrics(reg prometheus.Registerer) (*ConversionMetrics, error) {
	m := &ConversionMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "widget_conversion_requests_total",
			Help: "ConversionReview requests answered, by source version (mixed when a request holds several), desired version and result (success, failure: a conversion refused, error: a malformed request).",
		}, []string{"from_version", "to_version", "result"}),
		converted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "widget_conversion_objects_total",
			Help: "Widgets converted successfully, by source and desired version.",
		}, []string{"from_version", "to_version"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "widget_conversion_duration_seconds",
			Help:    "Time to answer one ConversionReview, from reading the body to encoding the response.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"from_version", "to_version"}),
		reviewObjects: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "widget_conversion_review_objects",
			Help:    "Objects in one ConversionReview that parsed (all of them, or those read before a failed one stopped the reading): 1 for a single object, up to a whole LIST page.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10), // 1 … 262144
		}),
		reviewBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "widget_conversion_review_bytes",
			Help:    "Body size of one ConversionReview that parsed, in bytes, whatever its result; a body over the limit is refused before it is read and counted in widget_conversion_failures_total{reason=\"BodyTooLarge\"} instead.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 10), // 1 KiB … 256 MiB
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "widget_conversion_failures_total",
			Help: "ConversionReview requests that did not succeed, by reason.",
		}, []string{"reason"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "widget_conversion_degraded_total",
			Help: "Widgets converted without data they held but the webhook could not use (InvalidConversionData: a conversion-data annotation that does not parse), by reason: each was returned marked with the annotation widgetry.io/conversion-degraded instead of failing its whole review.",
		}, []string{"reason"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "widget_conversion_panics_total",
			Help: "Panics recovered while converting (a bug): each failed its review, and the server went on.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.converted, m.duration, m.reviewObjects, m.reviewBytes, m.failures, m.degraded, m.panics} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every reason starts at 0, so a rate over the failures shows 0 (not "no data") on a healthy
	// replica, and the first failure's increase is seen from its first sample.
	for _, reason := range []string{reasonMalformed, reasonUnsupportedVersion, reasonConversionFailed,
		reasonMethodNotAllowed, reasonMediaType, reasonBodyTooLarge, reasonPanic} {
		m.failures.WithLabelValues(reason)
	}
	m.degraded.WithLabelValues(reasonInvalidData)
	return m, nil
}

func (m *ConversionMetrics) request(from, to, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(from, to, result).Inc()
	m.duration.WithLabelValues(from, to).Observe(d.Seconds())
}

// review records the size of a review that parsed: its objects and its body's bytes.
func (m *ConversionMetrics) review(objects, bytes int) {
	if m == nil {
		return
	}
	m.reviewObjects.Observe(float64(objects))
	m.reviewBytes.Observe(float64(bytes))
}

func (m *ConversionMetrics) objects(from, to string, n int) {
	if m == nil {
		return
	}
	m.converted.WithLabelValues(from, to).Add(float64(n))
}

func (m *ConversionMetrics) degradedObjects(reason string, n int64) {
	if m == nil {
		return
	}
	m.degraded.WithLabelValues(reason).Add(float64(n))
}

func (m *ConversionMetrics) failure(reason string) {
	if m == nil {
		return
	}
	m.failures.WithLabelValues(reason).Inc()
	if reason == reasonPanic {
		m.panics.Inc()
	}
}

func failureReasonFor(status int) string {
	switch status {
	case http.StatusMethodNotAllowed:
		return reasonMethodNotAllowed
	case http.StatusUnsupportedMediaType:
		return reasonMediaType
	case http.StatusRequestEntityTooLarge:
		return reasonBodyTooLarge
	}
	return reasonMalformed
}

func reasonFor(err error) string {
	var malformed errMalformed
	if errors.As(err, &malformed) {
		return reasonMalformed
	}
	return reasonConversionFailed
}

package webhook

import (
	"sync/atomic"

	"github.com/widgetry/widget-operator/internal/conversion"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
)

// FailureLog logs failed webhook requests, each naming the objects it failed on, at a bounded
// rate: a client that sends a bad review in a loop must not turn the log into the outage.
// Lines it drops are counted and reported with the next line it writes.
type FailureLog struct {
	log     logr.Logger
	limiter *rate.Limiter
	dropped atomic.Int64
}

// NewFailureLog logs at most perSecond lines a second, burst at once.
func NewFailureLog(log logr.Logger, perSecond float64, burst int) *FailureLog {
	return &FailureLog{log: log, limiter: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

// failed logs one failure; a nil FailureLog logs nothing.
func (l *FailureLog) failed(message string, keysAndValues ...any) {
	if keysAndValues, ok := l.allow(keysAndValues); ok {
		l.log.Info("webhook request failed", append([]any{"error", message}, keysAndValues...)...)
	}
}

// degraded logs that a review converted n objects without data they held but could not be
// used (naming the first few), at the same bounded rate as failures; a nil FailureLog logs
// nothing.
func (l *FailureLog) degraded(n int64, sample []string, keysAndValues ...any) {
	keysAndValues, ok := l.allow(keysAndValues)
	if !ok {
		return
	}
	l.log.Info("converted objects without data they could not use; each is marked with the annotation "+conversion.DegradedAnnotation,
		append([]any{"objects", n, "first", sample}, keysAndValues...)...)
}

// allow takes a line from the rate limit (a nil FailureLog allows none), counting a dropped
// one, and adds to an allowed line how many were dropped since the last.
func (l *FailureLog) allow(keysAndValues []any) ([]any, bool) {
	if l == nil {
		return nil, false
	}
	if !l.limiter.Allow() {
		l.dropped.Add(1)
		return nil, false
	}
	if n := l.dropped.Swap(0); n > 0 {
		keysAndValues = append(keysAndValues, "suppressedSinceLastLine", n)
	}
	return keysAndValues, true
}

package webhook

import (
	"fmt"
	"net/http"
)

// Sizing of the webhook server from the memory the process may use (the Go memory limit the
// manager derives from the container's): the requests in flight may hold InFlightShare of it,
// the rest is the controller's caches, the runtime and garbage not yet collected; each body
// limit is what fits the budget at its handler's peak factor, capped at its default.

// DefaultMaxConversionBodyBytes bounds a ConversionReview body when no memory limit says
// otherwise. It is large on purpose: the apiserver sends a whole LIST page — from its watch
// cache possibly the whole collection — in one review, so a small limit would break large
// lists.
const DefaultMaxConversionBodyBytes = 64 << 20

// DefaultMaxAdmissionBodyBytes bounds an AdmissionReview body: an UPDATE carries the object
// (at most the apiserver's 3 MiB request limit) and the stored object (at most etcd's
// 1.5 MiB), plus the request around them. controller-runtime refuses above 7 MiB anyway.
const DefaultMaxAdmissionBodyBytes = 6 << 20

// AdmissionPeakFactor bounds the heap one AdmissionReview holds, as a multiple of its body:
// controller-runtime reads the body whole into a buffer it grows by doubling from 512 bytes
// (the outgrown buffers are garbage the heap holds until the next collection), then copies
// object and oldObject out of it; the handlers decode only typed fields. Tests hold the
// handlers to it.
const AdmissionPeakFactor = 5.0

// InFlightShare is the part of the memory limit the requests in flight may hold, in tenths:
// at the chart's default limit (256Mi, so a Go memory limit of 230Mi) that is 184Mi, of which
// large requests share 161Mi (the rest is the small requests' reserve): one ConversionReview
// at the 64Mi default body limit. The charge is an upper bound (a realistic review peaks at
// 1.3× its body), so the rest of the process keeps more than the remaining 46Mi.
const InFlightShare = 8

// Limits are the webhook server's memory bounds.
type Limits struct {
	// InFlightBytes is the process-wide budget; 0 means none.
	InFlightBytes     int64
	MaxConversionBody int64
	MaxAdmissionBody  int64
}

// LimitsFor derives the bounds from a memory limit (0: none known) and explicit overrides
// (0: derive). An explicit body limit above what the budget can hold at once is refused: such
// a request would be charged the whole budget and could still run the pod out of memory.
func LimitsFor(memoryLimit, inFlight, maxConversionBody, maxAdmissionBody int64) (Limits, error) {
	l := Limits{InFlightBytes: inFlight}
	if l.InFlightBytes == 0 && memoryLimit > 0 {
		l.InFlightBytes = memoryLimit / 10 * InFlightShare
	}
	// A body at the limit is a large request: it must fit the large requests' share.
	large := l.InFlightBytes - smallReserve(l.InFlightBytes)
	l.MaxConversionBody = derive(maxConversionBody, DefaultMaxConversionBodyBytes, large, ConversionPeakFactor)
	l.MaxAdmissionBody = derive(maxAdmissionBody, DefaultMaxAdmissionBodyBytes, large, AdmissionPeakFactor)
	if l.InFlightBytes > 0 {
		for _, c := range []struct {
			flag   string
			limit  int64
			factor float64
		}{{"--conversion-max-body-bytes", l.MaxConversionBody, ConversionPeakFactor}, {"--admission-max-body-bytes", l.MaxAdmissionBody, AdmissionPeakFactor}} {
			if need := Charge(c.limit, c.factor); need > large {
				return l, fmt.Errorf("%s=%d needs %d bytes in flight (%g× the body) but large requests may hold %d bytes of the in-flight budget of %d: lower it, or raise the memory limit (resources.limits.memory) or --webhook-inflight-bytes",
					c.flag, c.limit, need, c.factor, large, l.InFlightBytes)
			}
		}
	}
	return l, nil
}

func derive(explicit, def, budget int64, factor float64) int64 {
	switch {
	case explicit > 0:
		return explicit
	case budget > 0:
		return min(def, int64(float64(budget)/factor))
	}
	return def
}

// Charge is what a body of size bytes is charged against the budget at a peak factor.
func Charge(size int64, factor float64) int64 {
	return int64(float64(max(size, 1)) * factor)
}

// LimitBody refuses a request declared larger than limit before anything reads it (413), and
// cuts off one that turns out larger while it is read.
func LimitBody(limit int64, flag string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			http.Error(w, fmt.Sprintf("request body of %d bytes is over the limit of %d; raise the manager's %s", r.ContentLength, limit, flag), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

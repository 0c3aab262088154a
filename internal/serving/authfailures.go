package serving

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// AuthFailureLimiter stops a source address that keeps failing authentication from costing
// the apiserver a TokenReview per request: every request with a new bearer token is one
// TokenReview (only the answers for tokens seen before are cached), so a client inventing
// tokens would otherwise turn each of its requests into one. A source may fail Burst times,
// then once per Every; past that it is answered 429 without a review until it has earned
// another try. A token that authenticated within goodTokenTTL always passes, so a scraper
// that shares its address with an attacker (behind NAT, on the host network) keeps scraping.
type AuthFailureLimiter struct {
	Burst   int
	Every   rate.Limit
	limited *prometheus.CounterVec
	name    string

	mu      sync.Mutex
	sources map[string]*rate.Limiter
	good    map[[sha256.Size]byte]time.Time
}

// goodTokenTTL is how long a token that authenticated passes the limiter: shorter than a
// projected ServiceAccount token lives, long enough to span scrapes.
const goodTokenTTL = 5 * time.Minute

// maxTrackedSources bounds the sources remembered: past it the memory starts over, so an
// attacker with more addresses than this gets a fresh burst on each, no more.
const maxTrackedSources = 4096

// NewAuthFailureLimiter limits the sources of listener name; its refusals are counted in
// reg.
func NewAuthFailureLimiter(name string, burst int, every rate.Limit, reg prometheus.Registerer) (*AuthFailureLimiter, error) {
	l := &AuthFailureLimiter{Burst: burst, Every: every, name: name, sources: map[string]*rate.Limiter{}, good: map[[sha256.Size]byte]time.Time{},
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "widget_listener_auth_failures_limited_total",
			Help: "Requests answered 429 without a TokenReview because their source address had failed authentication too often.",
		}, []string{"listener"})}
	if err := reg.Register(l.limited); err != nil {
		return nil, err
	}
	l.limited.WithLabelValues(name)
	return l, nil
}

// Wrap guards next, an authenticating and authorizing handler (controller-runtime's metrics
// filter) around a handler wrapped in Reached. A request that does not reach it failed: a 401
// (no or an unknown token), a 500 (controller-runtime's answer when the TokenReview says the
// token is invalid), a 403 (a token not allowed to read).
func (l *AuthFailureLimiter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		source := r.RemoteAddr
		if host, _, err := net.SplitHostPort(source); err == nil {
			source = host
		}
		token := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		lim := l.limiter(source)
		if !l.knownGood(token) && lim.Tokens() < 1 {
			l.limited.WithLabelValues(l.name).Inc()
			w.Header().Set("Retry-After", fmt.Sprint(int(1/float64(l.Every))+1))
			http.Error(w, fmt.Sprintf("too many failed authentications from %s: send a valid bearer token (a ServiceAccount token allowed to get /metrics)", source), http.StatusTooManyRequests)
			return
		}
		reached := new(atomic.Bool)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reachedKey{}, reached)))
		if reached.Load() {
			l.remember(token)
		} else {
			lim.Allow()
		}
	})
}

type reachedKey struct{}

// Reached marks the requests that get through the authenticating handler to inner.
func (l *AuthFailureLimiter) Reached(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reached, ok := r.Context().Value(reachedKey{}).(*atomic.Bool); ok {
			reached.Store(true)
		}
		inner.ServeHTTP(w, r)
	})
}

func (l *AuthFailureLimiter) limiter(source string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.sources[source]
	if !ok {
		if len(l.sources) >= maxTrackedSources {
			clear(l.sources)
		}
		lim = rate.NewLimiter(l.Every, l.Burst)
		l.sources[source] = lim
	}
	return lim
}

func (l *AuthFailureLimiter) knownGood(token [sha256.Size]byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.good[token])
}

func (l *AuthFailureLimiter) remember(token [sha256.Size]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.good) >= maxTrackedSources {
		clear(l.good)
	}
	l.good[token] = time.Now().Add(goodTokenTTL)
}

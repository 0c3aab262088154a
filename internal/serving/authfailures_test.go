package serving

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAuthFailuresLimitedPerSource: a source that keeps failing authentication reaches the
// authenticator Burst times, then gets 429s that cost nothing; another source, and a token
// that authenticated before, are not held back by it.
func TestAuthFailuresLimitedPerSource(t *testing.T) {
	l, err := NewAuthFailureLimiter("metrics", 3, 0.001, prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	reviews := 0
	metrics := l.Reached(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reviews++ // a TokenReview
		if r.Header.Get("Authorization") != "Bearer good" {
			http.Error(w, "Authentication failed", http.StatusInternalServerError) // as controller-runtime's filter answers an invalid token
			return
		}
		metrics.ServeHTTP(w, r)
	}))
	send := func(source, token string) int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.RemoteAddr = source + ":40000"
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := send("10.0.0.1", "good"); code != http.StatusOK {
		t.Fatalf("a good token: %d", code)
	}
	reviews = 0
	for i := range 20 {
		code := send("10.0.0.1", "forged")
		want := http.StatusInternalServerError
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if code != want {
			t.Fatalf("forged token %d: %d, want %d", i+1, code, want)
		}
	}
	if reviews != 3 {
		t.Errorf("20 forged tokens from one source cost %d reviews, want 3", reviews)
	}
	if got := testutil.ToFloat64(l.limited.WithLabelValues("metrics")); got != 17 {
		t.Errorf("limited: %v, want 17", got)
	}
	if code := send("10.0.0.2", "good"); code != http.StatusOK {
		t.Errorf("another source's scrape: %d", code)
	}
	if code := send("10.0.0.1", "good"); code != http.StatusOK {
		t.Errorf("a token that authenticated before, from the limited source: %d", code)
	}
	for range 5 {
		if code := send("10.0.0.3", "good"); code != http.StatusOK {
			t.Errorf("a source that authenticates: %d", code)
		}
	}
}

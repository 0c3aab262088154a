package widgetenv

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWarmOpensConnectionsThatStayOpen: Warm leaves n connections open to each target, and
// the load that follows uses them rather than dialing.
func TestWarmOpensConnectionsThatStayOpen(t *testing.T) {
	const n = 8
	var opened, arrived atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The warming requests are held until all n have arrived, so each needed a connection
		// of its own.
		if a := arrived.Add(1); a <= n {
			if a == n {
				once.Do(func() { close(release) })
			}
			select {
			case <-release:
			case <-time.After(2 * time.Second): // a Warm that sends one at a time
			}
		}
		_, _ = w.Write([]byte(`{"response":{"allowed":true}}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	l := &Load{Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}},
		Targets: func() []string { return []string{srv.URL} }, Rate: 50}
	if err := l.Warm(n); err != nil {
		t.Fatal(err)
	}
	if got := opened.Load(); got != n {
		t.Fatalf("Warm(%d) opened %d connections", n, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := l.Run(ctx)
	if res.Requests == 0 || res.Failures > 0 {
		t.Fatalf("the load after Warm: %s", res)
	}
	if got := opened.Load(); got != n {
		t.Errorf("the load dialed %d more connections after Warm", got-n)
	}
}

// TestBetweenKeepsTheWindow: Between keeps the requests started within [from, to), with
// their failures, and nothing else.
func TestBetweenKeepsTheWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	r := &LoadResult{Errors: []string{"x"}}
	for i, lat := range []time.Duration{10, 900, 20, 30} {
		r.Sent = append(r.Sent, Sent{Start: t0.Add(time.Duration(i) * time.Second), Latency: lat * time.Millisecond, Failed: i == 2})
	}
	part := r.Between(t0.Add(time.Second), t0.Add(3*time.Second))
	if part.Requests != 2 || part.Failures != 1 || part.Worst != 900*time.Millisecond || len(part.Sent) != 2 || len(part.Latencies) != 2 {
		t.Errorf("Between(1s, 3s) = %d requests, %d failed, worst %s; want the two of 1s and 2s, one failed, worst 900ms",
			part.Requests, part.Failures, part.Worst)
	}
	if got := r.Between(t0.Add(10*time.Second), t0.Add(20*time.Second)); got.Requests != 0 || got.Quantile(0.99) != 0 {
		t.Errorf("a window without requests: %d requests, p99 %s", got.Requests, got.Quantile(0.99))
	}
}

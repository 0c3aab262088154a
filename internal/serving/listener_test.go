package serving

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// serve runs handler on a loopback listener within l and returns its address and metrics.
func serve(t *testing.T, l Limits, handler http.Handler) (string, *ListenerMetrics) {
	t.Helper()
	m, err := NewListenerMetrics(prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := l.Server(handler)
	go func() { _ = srv.Serve(Listen(ln, "test", l, m)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), m
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

// get sends one request on a new connection and returns the status line, or the error.
func get(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

// trickle opens a connection that sends a request line and then header bytes, one every
// interval, until the server closes it or for at most d; it returns how long it stayed open.
func trickle(addr string, interval, d time.Duration) (time.Duration, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "GET /readyz HTTP/1.1\r\nHost: x\r\nX-Trickle: "); err != nil {
		return time.Since(start), nil
	}
	for time.Since(start) < d {
		if _, err := conn.Write([]byte("a")); err != nil {
			return time.Since(start), nil
		}
		_ = conn.SetReadDeadline(time.Now().Add(interval))
		if _, err := conn.Read(make([]byte, 512)); err != nil {
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				continue
			}
			return time.Since(start), nil // answered (408, 431) or closed
		}
		return time.Since(start), nil
	}
	return time.Since(start), fmt.Errorf("still open after %s", d)
}

// TestPerSourceCap: one source address gets MaxConnsPerSource connections; the next is closed
// at once and counted, and a connection freed lets the next one in.
func TestPerSourceCap(t *testing.T) {
	l := ProbeLimits
	addr, m := serve(t, l, http.HandlerFunc(ok))
	var held []net.Conn
	for range l.MaxConnsPerSource {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.open.WithLabelValues("test")) < float64(l.MaxConnsPerSource) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if line, err := get(addr); err == nil {
		t.Fatalf("connection %d from one source was answered %q; want it closed unanswered", l.MaxConnsPerSource+1, line)
	}
	if got := testutil.ToFloat64(m.refused.WithLabelValues("test")); got != 1 {
		t.Errorf("refused connections counted: %v, want 1", got)
	}
	_ = held[0].Close()
	deadline = time.Now().Add(5 * time.Second)
	for {
		line, err := get(addr)
		if err == nil && line == "HTTP/1.1 200 OK" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one connection closed, a new one still gets %q %v", line, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range held[1:] {
		_ = c.Close()
	}
}

// TestTotalCapQueues: past MaxConns, a connection waits in the backlog and is served once one
// closes, rather than refused.
func TestTotalCapQueues(t *testing.T) {
	l := Limits{ReadHeaderTimeout: 5 * time.Second, MaxConns: 2}
	addr, m := serve(t, l, http.HandlerFunc(ok))
	a, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	answered := make(chan string, 1)
	go func() { line, _ := get(addr); answered <- line }()
	select {
	case line := <-answered:
		t.Fatalf("a third connection was answered %q while two held the cap of 2", line)
	case <-time.After(300 * time.Millisecond):
	}
	if got := testutil.ToFloat64(m.waited.WithLabelValues("test")); got < 1 {
		t.Errorf("capped_total %v, want at least 1", got)
	}
	_ = a.Close()
	if line := <-answered; line != "HTTP/1.1 200 OK" {
		t.Errorf("the waiting connection got %q once a slot freed", line)
	}
}

// TestTrickledHeadersAreCutOff is the security review's attack on the probe and metrics
// listeners: 100 connections from one address each trickling an unfinished header. Within the
// probe limits the source's first 16 are cut off at the header timeout and the rest closed at
// once; with controller-runtime's defaults (the negative control: 32 s to send up to 1 MiB of
// headers, no cap) every one is still open when the test stops waiting.
func TestTrickledHeadersAreCutOff(t *testing.T) {
	controllerRuntime := Limits{ReadHeaderTimeout: 32 * time.Second, MaxHeaderBytes: 1 << 20}
	for _, tc := range []struct {
		name     string
		limits   Limits
		wantOpen bool
	}{{"probe limits", ProbeLimits, false}, {"controller-runtime's defaults", controllerRuntime, true}} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := serve(t, tc.limits, http.HandlerFunc(ok))
			const n = 100
			hold := tc.limits.ReadHeaderTimeout + 3*time.Second
			if tc.wantOpen {
				hold = ProbeLimits.ReadHeaderTimeout + 3*time.Second
			}
			var mu sync.Mutex
			stillOpen, worst := 0, time.Duration(0)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					held, err := trickle(addr, 200*time.Millisecond, hold)
					mu.Lock()
					defer mu.Unlock()
					worst = max(worst, held)
					if err != nil {
						stillOpen++
					}
				})
			}
			wg.Wait()
			if tc.wantOpen && stillOpen < n {
				t.Errorf("negative control: only %d of %d trickling connections were still open after %s; the attack no longer works, so this test proves nothing", stillOpen, n, hold)
			}
			if !tc.wantOpen && stillOpen > 0 {
				t.Errorf("%d of %d trickling connections were still open after %s (the longest held %s)", stillOpen, n, hold, worst)
			}
		})
	}
}

// TestLargeHeadersRefused: a header over MaxHeaderBytes is answered 431, not buffered.
func TestLargeHeadersRefused(t *testing.T) {
	addr, _ := serve(t, ProbeLimits, http.HandlerFunc(ok))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		_, _ = io.WriteString(conn, "GET /readyz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
	}()
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.Contains(line, "431") {
		t.Errorf("a 64 KiB header got %q, want 431", line)
	}
}

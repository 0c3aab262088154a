package webhook

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/webhook/webhooktest"
)

// chartBudgetWait is the manager's default --webhook-budget-wait.
const chartBudgetWait = 5 * time.Second

// budgetServer serves the conversion handler behind the budget at the chart's defaults (a
// 256Mi container: a Go memory limit of 230Mi) over TLS on loopback.
func budgetServer(t *testing.T) (*httptest.Server, *InFlightBudget) {
	t.Helper()
	limits, err := LimitsFor(256<<20/10*9, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	budget, err := NewInFlightBudget(limits.InFlightBytes, chartBudgetWait, reg)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := NewConversionMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(ConvertPath, budget.Limit(ConvertPath, ConversionPeakFactor, limits.MaxConversionBody,
		&ConversionHandler{MaxBodyBytes: limits.MaxConversionBody, Metrics: metrics}))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = false
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, budget
}

// headersOnly opens a connection that sends a conversion request's headers, declaring a
// body of declared bytes, and nothing more; the test's end closes it.
func headersOnly(t *testing.T, srv *httptest.Server, declared int64) {
	t.Helper()
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own server
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", ConvertPath, declared); err != nil {
		t.Fatal(err)
	}
}

// TestDeclaredBodiesHoldNoBudget is the security review's attack on the budget, at the
// chart's defaults: 26 connections that send headers only — one declaring a 64 MiB body, 25
// sized to fill the small requests' reserve — and then a single Widget's review and a 4 MiB
// LIST page. Charged as declared, both waited out the budget and got 503; charged as their
// bodies arrive, the idle connections hold nothing and both are converted at once. With the
// protection off (the negative control) the same attack gets its 503s again.
func TestDeclaredBodiesHoldNoBudget(t *testing.T) {
	for _, protected := range []bool{true, false} {
		t.Run(fmt.Sprintf("charged as bodies arrive=%t", protected), func(t *testing.T) {
			was := chargeAsBodiesArrive
			chargeAsBodiesArrive = protected
			t.Cleanup(func() { chargeAsBodiesArrive = was })
			srv, budget := budgetServer(t)
			headersOnly(t, srv, DefaultMaxConversionBodyBytes)
			// 25 declared bodies charged together all but a few bytes of the small requests'
			// reserve.
			small := int64(float64(budget.small.size) / 25 / ConversionPeakFactor)
			for range 25 {
				headersOnly(t, srv, small)
			}
			time.Sleep(200 * time.Millisecond) // the server has read every request's headers
			client := srv.Client()
			for _, size := range []int{2 << 10, 4 << 20} {
				body, n := webhooktest.Realistic("after-attack", v1.GroupVersion.String(), size)
				resp, err := client.Post(srv.URL+ConvertPath, "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				head, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				status, msg := webhooktest.Result(head)
				ok := resp.StatusCode == http.StatusOK && status == "Success"
				if protected && !ok {
					t.Errorf("a %d-byte review of %d Widgets during the attack: %d %s %s %.200s", len(body), n, resp.StatusCode, status, msg, head)
				}
				if !protected && resp.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("negative control: a %d-byte review during the attack got %d, want the budget's 503 (the attack no longer works, so this test proves nothing)", len(body), resp.StatusCode)
				}
			}
		})
	}
}

// TestTrickledBodyHoldsWhatItSent: a client that sends part of a large body and stalls holds
// about what it sent, not what it declared: large reviews beside it go through.
func TestTrickledBodyHoldsWhatItSent(t *testing.T) {
	srv, _ := budgetServer(t)
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own server
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		ConvertPath, DefaultMaxConversionBodyBytes, bytes.Repeat([]byte(" "), 1<<20)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	body, n := webhooktest.Realistic("beside-a-trickle", v1.GroupVersion.String(), 32<<20)
	resp, err := srv.Client().Post(srv.URL+ConvertPath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if status, msg := webhooktest.Result(head); resp.StatusCode != http.StatusOK || status != "Success" {
		t.Errorf("a 32 MiB review of %d Widgets beside a client that sent 1 MiB of a declared 64 MiB: %d %s %s", n, resp.StatusCode, status, msg)
	}
	// The stalled client gets its answer when its body stops short.
	_ = conn.CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(conn)
	if !bytes.Contains(answer, []byte("400 Bad Request")) || !bytes.Contains(answer, []byte("unexpected EOF")) {
		t.Errorf("the stalled client, once it stopped sending, got %.300q; want a 400 naming the short body", answer)
	}
}

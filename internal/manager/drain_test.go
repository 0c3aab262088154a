//go:build envtest

package manager_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// emptyReview is a valid ConversionReview with nothing to convert.
const emptyReview = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"drain","desiredAPIVersion":"widgetry.io/v1","objects":[]}}`

// keepAliveClient is a client like the apiserver's for webhooks: HTTP/1.1, connections kept
// alive and reused, closed by the client after idleTimeout (the apiserver's is 90 s).
func keepAliveClient(op *widgetenv.Operator, idleTimeout time.Duration) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: op.CA.CertPool(), MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 16, IdleConnTimeout: idleTimeout}}
}

// convert POSTs emptyReview on n connections at once and reports, per request, whether it
// reused a kept-alive connection and whether the answer said "Connection: close".
func convert(t *testing.T, c *http.Client, url string, n int) (reused, closing int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for range n {
		wg.Go(func() {
			var wasReused bool
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { wasReused = i.Reused }})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/convert", bytes.NewReader([]byte(emptyReview)))
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs = append(errs, fmt.Errorf("HTTP %d", resp.StatusCode))
			}
			if wasReused {
				reused++
			}
			if resp.Close {
				closing++
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d requests failed: %v", len(errs), n, errs)
	}
	return reused, closing
}

// TestDrainLeavesKeptAliveConnectionsToTheClient: a draining replica never closes a
// kept-alive connection under its client. Past the drain delay, connections opened before
// SIGTERM and idle since are still served when the client reuses them, each answer saying
// "Connection: close"; the replica exits once its clients have closed every connection and
// no new one came for the quiet period, not at the drain delay (which would fail a request
// sent on a connection as it closes) and not only at the connection drain timeout (the last
// new connection came long before, so the quiet period has passed). A client
// that holds an idle connection longer than the timeout gets it closed then, and the log
// says so.
func TestDrainLeavesKeptAliveConnectionsToTheClient(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)

	t.Run("clients close", func(t *testing.T) {
		m := op.StartManager(t, widgetenv.ManagerOptions{Args: []string{"--drain-delay=1s", "--connection-drain-timeout=30s"}})
		url := "https://127.0.0.1:" + strconv.Itoa(m.WebhookPort)
		c := keepAliveClient(op, time.Minute)
		convert(t, c, url, 4) // four connections, idle from now on
		if err := m.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		time.Sleep(2 * time.Second) // past the drain delay
		reused, closing := convert(t, c, url, 4)
		if reused == 0 || closing != 4 {
			t.Errorf("past the drain delay: %d of 4 requests reused a connection kept alive from before SIGTERM, %d were answered with Connection: close; want at least one and 4", reused, closing)
		}
		answered := time.Now()
		select {
		case <-m.Exited():
		case <-time.After(20 * time.Second):
			t.Fatal("the manager did not exit within 20 s of its clients closing every connection")
		}
		t.Logf("exited %s after SIGTERM, %s after the last answer", time.Since(sent).Round(time.Millisecond), time.Since(answered).Round(time.Millisecond))
		if !m.LogContains("every webhook connection closed by its client") {
			t.Error("the log does not say the connections were drained")
		}
	})

	t.Run("an idle connection past the timeout", func(t *testing.T) {
		m := op.StartManager(t, widgetenv.ManagerOptions{Args: []string{"--drain-delay=1s", "--connection-drain-timeout=6s"}})
		url := "https://127.0.0.1:" + strconv.Itoa(m.WebhookPort)
		convert(t, keepAliveClient(op, time.Hour), url, 1) // held idle for longer than the test
		if err := m.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		<-m.Exited()
		took := time.Since(sent)
		if took < 5500*time.Millisecond || took > 15*time.Second {
			t.Errorf("exited %s after SIGTERM, want about the 6 s connection drain timeout", took)
		}
		if !m.LogContains("connection drain timed out") || !m.LogContains(`"open":1`) {
			t.Error("the log does not name the connection closed at the timeout")
		}
	})
}

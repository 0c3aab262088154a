//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
	"github.com/widgetry/widget-operator/internal/webhook"
	"github.com/widgetry/widget-operator/internal/webhook/webhooktest"
)

// attacker sends requests straight to the webhook pods, from inside the cluster's network
// (as any pod could: the NetworkPolicy is off by default and no client certificate is
// required), over TLS verified against the chart's CA.
type attacker struct {
	t      *testing.T
	c      *cluster.Cluster
	client *http.Client
	tls    *tls.Config
	ca     []byte
	pods   []corev1.Pod
}

func newAttacker(t *testing.T, c *cluster.Cluster, k client.Client) *attacker {
	t.Helper()
	secret := &corev1.Secret{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: release + "-serving-cert"}, secret); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		t.Fatal("the serving certificate Secret has no ca.crt")
	}
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: release + "-webhook." + ns + ".svc", MinVersion: tls.VersionTLS12}
	a := &attacker{t: t, c: c, tls: tlsConfig, ca: secret.Data["ca.crt"], pods: webhookPods(t, k)}
	a.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: c.DialContext, TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 256, ForceAttemptHTTP2: false,
	}}
	return a
}

// webhookPods are the webhook plane's running pods.
func webhookPods(t *testing.T, k client.Client) []corev1.Pod {
	t.Helper()
	return webhookPodsOf(t, k, ns)
}

// webhookPodsOf is webhookPods in namespace.
func webhookPodsOf(t *testing.T, k client.Client, namespace string) []corev1.Pod {
	t.Helper()
	return planePodsOf(t, k, namespace, "webhook")
}

// planePodsOf are the running pods of plane (webhook or controller) in namespace.
func planePodsOf(t *testing.T, k client.Client, namespace, plane string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k.List(context.Background(), pods, client.InNamespace(namespace),
		client.MatchingLabels{"app.kubernetes.io/name": release, "app.kubernetes.io/component": plane}); err != nil {
		t.Fatal(err)
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		t.Fatalf("no running %s pod", plane)
	}
	return running
}

// convert POSTs body to pod's /convert and returns the status and the answer's first bytes.
func (a *attacker) convert(pod corev1.Pod, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, "https://"+net.JoinHostPort(pod.Status.PodIP, "9443")+webhook.ConvertPath, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(resp.Body, head)
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, head[:n], err
}

// hostileShapes sends every hostile shape to every pod; each must get its answer.
func (a *attacker) hostileShapes() {
	for _, r := range webhooktest.Hostile(8 << 20) {
		for _, pod := range a.pods {
			code, head, err := a.convert(pod, r.Body)
			got, text := fmt.Sprint(code), string(head)
			if code == http.StatusOK {
				got, text = webhooktest.Result(head)
			}
			if err != nil || got != r.Want || !strings.Contains(text, r.WantText) {
				a.t.Errorf("%s to %s: %v %s %.200s; want %s mentioning %q", r.Name, pod.Name, err, got, head, r.Want, r.WantText)
			}
		}
	}
}

// largestReviews sends a realistic review at the default body limit to every pod.
func (a *attacker) largestReviews() {
	body, n := webhooktest.Realistic("largest", v1.GroupVersion.String(), webhook.DefaultMaxConversionBodyBytes)
	for _, pod := range a.pods {
		code, head, err := a.convert(pod, body)
		if status, msg := webhooktest.Result(head); err != nil || code != http.StatusOK || status != "Success" {
			a.t.Errorf("a %d-byte review of %d Widgets to %s: %v %d %s %s", len(body), n, pod.Name, err, code, status, msg)
		}
	}
}

// slowLoris opens n connections to every pod that send their headers a byte at a time, and
// returns how long the slowest was held open; the server must cut each off.
func (a *attacker) slowLoris(n int) time.Duration {
	var mu sync.Mutex
	var worst time.Duration
	var wg sync.WaitGroup
	for _, pod := range a.pods {
		for range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				raw, err := a.c.DialContext(ctx, "tcp", net.JoinHostPort(pod.Status.PodIP, "9443"))
				if err != nil {
					a.t.Errorf("slow client: dial %s: %v", pod.Name, err)
					return
				}
				conn := tls.Client(raw, a.tls)
				defer conn.Close()
				start := time.Now()
				if err := conn.HandshakeContext(ctx); err != nil {
					a.t.Errorf("slow client: TLS handshake with %s: %v", pod.Name, err)
					return
				}
				for _, b := range []byte("POST /convert HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: " + strings.Repeat("a", 60)) {
					if _, err := conn.Write([]byte{b}); err != nil {
						break // cut off
					}
					time.Sleep(time.Second)
				}
				// Whatever the server sent last (a 408, or nothing), the connection ends.
				_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, err = io.Copy(io.Discard, conn)
				held := time.Since(start)
				var netErr net.Error
				if errors.As(err, &netErr) && netErr.Timeout() {
					a.t.Errorf("slow client: %s kept the connection open for %s", pod.Name, held.Round(time.Second))
				}
				mu.Lock()
				worst = max(worst, held)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return worst
}

// flood sends n realistic reviews of size bytes at once, spread over the pods, and counts
// the answers: each must be a converted review or the budget's 503 ("webhook busy": memory or
// the processors for large requests), never anything else.
func (a *attacker) flood(n, size int) map[string]int {
	body, _ := webhooktest.Realistic("flood", v1.GroupVersion.String(), size)
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			pod := a.pods[i%len(a.pods)]
			code, head, err := a.convert(pod, body)
			status, _ := webhooktest.Result(head)
			key := fmt.Sprintf("%d %s", code, status)
			switch {
			case err != nil:
				key = "error"
				a.t.Errorf("flood request to %s: %v", pod.Name, err)
			case code == http.StatusOK && status == "Success":
			case code == http.StatusServiceUnavailable && bytes.Contains(head, []byte("webhook busy")):
				key = "503 busy"
			default:
				a.t.Errorf("flood request to %s: %d %.200s", pod.Name, code, head)
			}
			mu.Lock()
			answers[key]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return answers
}

// unharmed checks that the pods attacked are the ones running, none restarted.
func (a *attacker) unharmed(k client.Client) {
	now := webhookPods(a.t, k)
	for _, before := range a.pods {
		found := false
		for _, p := range now {
			if p.UID != before.UID {
				continue
			}
			found = true
			// Restarts since the attack began: a step before may have restarted one on purpose.
			was := map[string]int32{}
			for _, cs := range before.Status.ContainerStatuses {
				was[cs.Name] = cs.RestartCount
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.RestartCount > was[cs.Name] {
					a.t.Errorf("container %s of %s restarted %d times during the attack (last state %+v)", cs.Name, p.Name, cs.RestartCount-was[cs.Name], cs.LastTerminationState.Terminated)
				}
			}
		}
		if !found {
			a.t.Errorf("pod %s is gone", before.Name)
		}
	}
}

// declaredBodies opens, to every pod's webhook port, connections that send a
// ConversionReview's headers and never its body: one declaring the default body limit and 25
// sized to fill the small requests' reserve at the chart's defaults (the security review's
// attack on the in-flight budget). It returns a func that closes them.
func (a *attacker) declaredBodies() func() {
	limits, err := webhook.LimitsFor(chartMemoryLimit/10*9, 0, 0, 0)
	if err != nil {
		a.t.Fatal(err)
	}
	reserve := limits.InFlightBytes / 8 * webhook.SmallReserveShare
	sizes := []int64{webhook.DefaultMaxConversionBodyBytes}
	for range 25 {
		sizes = append(sizes, int64(float64(reserve)/25/webhook.ConversionPeakFactor))
	}
	var conns []net.Conn
	for _, pod := range a.pods {
		for _, size := range sizes {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			raw, err := a.c.DialContext(ctx, "tcp", net.JoinHostPort(pod.Status.PodIP, "9443"))
			cancel()
			if err != nil {
				a.t.Errorf("declared bodies: dial %s: %v", pod.Name, err)
				continue
			}
			conn := tls.Client(raw, a.tls)
			conns = append(conns, conn)
			if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", webhook.ConvertPath, size); err != nil {
				a.t.Errorf("declared bodies: %s: %v", pod.Name, err)
			}
		}
	}
	return func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// chartMemoryLimit is the chart's default resources.limits.memory of the webhook container.
const chartMemoryLimit = 256 << 20

// trickledHeaders opens n connections to port of every pod (over TLS when secure) that each
// send a request line and then a header of up to 1 MiB, 8 KiB every 200 ms; it returns how
// many the pods still held open after hold, and the longest any was held.
func (a *attacker) trickledHeaders(port int, secure bool, n int, hold time.Duration) (int, time.Duration) {
	var mu sync.Mutex
	open, worst := 0, time.Duration(0)
	var wg sync.WaitGroup
	for _, pod := range a.pods {
		for range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				raw, err := a.c.DialContext(ctx, "tcp", net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(port)))
				cancel()
				if err != nil {
					return // refused: not held
				}
				conn := raw
				if secure {
					conn = tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // an attacker verifies nothing
				}
				defer conn.Close()
				start := time.Now()
				held := func() time.Duration {
					if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Trickle: "); err != nil {
						return time.Since(start)
					}
					chunk := strings.Repeat("a", 8<<10)
					for sent := 0; sent < 1<<20 && time.Since(start) < hold; sent += len(chunk) {
						if _, err := io.WriteString(conn, chunk); err != nil {
							return time.Since(start)
						}
						_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
						if _, err := conn.Read(make([]byte, 512)); err != nil {
							var netErr net.Error
							if errors.As(err, &netErr) && netErr.Timeout() {
								continue
							}
						}
						return time.Since(start) // answered (431, 408) or closed
					}
					return -1
				}()
				mu.Lock()
				defer mu.Unlock()
				if held < 0 {
					open++
					held = time.Since(start)
				}
				worst = max(worst, held)
			})
		}
	}
	wg.Wait()
	return open, worst
}

// Keys of inventedTokens' answers that are not HTTP statuses.
const (
	// notSent: the request failed before it was written (the connection was refused or
	// closed by the listener's connection limit, which the trickled headers fill): the server
	// never saw its token, so it cost no TokenReview.
	notSent = 0
	// sentNoAnswer: written, then no answer; counted as reviewed, since it may have cost one.
	sentNoAnswer = -1
)

// inventedTokens sends n metrics requests with invented bearer tokens to every pod and counts
// the answers by status: after the first few (each a TokenReview), 429s that cost nothing.
func (a *attacker) inventedTokens(n int) map[int]int {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: a.c.DialContext, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // an attacker verifies nothing
	}}
	defer client.CloseIdleConnections()
	answers := map[int]int{}
	for _, pod := range a.pods {
		for i := range n {
			req, err := http.NewRequest(http.MethodGet, "https://"+net.JoinHostPort(pod.Status.PodIP, "8443")+"/metrics", nil)
			if err != nil {
				a.t.Fatal(err)
			}
			req.Header.Set("Authorization", fmt.Sprintf("Bearer invented-%d", i))
			wrote := false
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				WroteRequest: func(info httptrace.WroteRequestInfo) { wrote = info.Err == nil },
			}))
			resp, err := client.Do(req)
			if err != nil {
				if wrote {
					answers[sentNoAnswer]++
				} else {
					answers[notSent]++
				}
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			answers[resp.StatusCode]++
		}
	}
	return answers
}

// everyday sends, at rate per second until ctx ends, a single Widget's ConversionReview and an
// AdmissionReview in turn to each pod, as the apiserver does for everyday reads and writes. Like
// the apiserver it is a process of its own (startEveryday), not goroutines queued behind the
// attacker's in this one, and has connections of its own, kept alive as client-go's transport
// cache keeps them: the attacker cannot take them, and its new ones queue in the pods' accept
// backlog with the attacker's.
func (a *attacker) everyday(ctx context.Context, rate int) *widgetenv.LoadResult {
	spec := everydaySpec{NetNS: a.c.NetNS, CA: a.ca, ServerName: a.tls.ServerName, Rate: rate}
	for _, pod := range a.pods {
		spec.Targets = append(spec.Targets, "https://"+net.JoinHostPort(pod.Status.PodIP, "9443"))
	}
	res, err := startEveryday(ctx, spec)
	if err != nil {
		a.t.Errorf("the everyday load's process: %v", err)
		return &widgetenv.LoadResult{}
	}
	return res
}

package widgetenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/widgetry/widget-operator/internal/webhook"
)

// Load sends ConversionReview and AdmissionReview requests straight to webhook servers at a
// fixed rate, checking every answer, as the apiserver would during rollouts and failovers.
type Load struct {
	// Client must trust the serving certificate.
	Client *http.Client
	// Targets returns the base URLs ("https://127.0.0.1:PORT") to spread requests over; it
	// is called for every request, so a test can take a replica out as an endpoint
	// controller would.
	Targets func() []string
	// Rate is the total number of requests per second.
	Rate int
	// Paths are the webhook paths requests go to in turn: webhook.ConvertPath gets a
	// single-object ConversionReview, webhook.ValidatePath an AdmissionReview. Default:
	// both, alternately.
	Paths []string
}

// LoadResult sums up a run.
type LoadResult struct {
	Requests, Failures int
	Worst              time.Duration
	// Latencies are every request's, in the order they completed.
	Latencies []time.Duration
	// Sent are every request's start, path and latency, in the same order.
	Sent []Sent
	// Errors holds the first failures, for the test's message.
	Errors []string
}

// Sent is one request of a load: when it started, where it went, how long it took.
type Sent struct {
	Start   time.Time
	Target  string
	Path    string
	Latency time.Duration
	// Conn is how long the request waited for its connection (a dial and a TLS handshake, or
	// an idle one), Answer from the request written to the answer's first byte.
	Conn, Answer time.Duration
	// Failed is whether it failed (its error, if among the first, is in LoadResult.Errors).
	Failed bool
}

// Between is the part of r sent from from until to: the requests that a fault running then
// could meet, without those sent before or after it, whose quicker answers would hide its
// effect.
func (r *LoadResult) Between(from, to time.Time) *LoadResult {
	part := &LoadResult{Errors: r.Errors}
	for _, s := range r.Sent {
		if s.Start.Before(from) || !s.Start.Before(to) {
			continue
		}
		part.Requests++
		part.Worst = max(part.Worst, s.Latency)
		part.Latencies = append(part.Latencies, s.Latency)
		part.Sent = append(part.Sent, s)
		if s.Failed {
			part.Failures++
		}
	}
	return part
}

// Slowest names the n slowest requests, slowest first, with their start times.
func (r *LoadResult) Slowest(n int) string {
	sorted := slices.Clone(r.Sent)
	slices.SortFunc(sorted, func(a, b Sent) int { return int(b.Latency - a.Latency) })
	var out []string
	for _, s := range sorted[:min(n, len(sorted))] {
		out = append(out, fmt.Sprintf("%s%s at %s: %s (connection %s, answer %s)", s.Target, s.Path, s.Start.Format("15:04:05.000"),
			s.Latency.Round(time.Millisecond), s.Conn.Round(time.Millisecond), s.Answer.Round(time.Millisecond)))
	}
	return strings.Join(out, "; ")
}

// QuantileOf is Quantile over the requests sent to path alone.
func (r *LoadResult) QuantileOf(path string, q float64) time.Duration {
	of := &LoadResult{}
	for _, s := range r.Sent {
		if s.Path == path {
			of.Latencies = append(of.Latencies, s.Latency)
		}
	}
	return of.Quantile(q)
}

// Quantile is the q-quantile (0 < q <= 1) of the latencies, the nearest rank; 0 without
// requests.
func (r *LoadResult) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	sorted := slices.Clone(r.Latencies)
	slices.Sort(sorted)
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func (r *LoadResult) String() string {
	return fmt.Sprintf("%d requests, %d failed, worst latency %s", r.Requests, r.Failures, r.Worst.Round(time.Millisecond))
}

var (
	conversionBody = []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"load","desiredAPIVersion":"widgetry.io/v1","objects":[` +
		`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"load","namespace":"default"},"spec":{"image":"srv:1","replicas":2,"timeoutSeconds":30,"endpoints":[{"name":"http","port":8080}]}}]}}`)
	admissionBody = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"load","kind":{"group":"widgetry.io","version":"v1alpha1","kind":"Widget"},` +
		`"resource":{"group":"widgetry.io","version":"v1alpha1","resource":"widgets"},"name":"load","namespace":"default","operation":"CREATE","userInfo":{},` +
		`"object":{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"load","namespace":"default"},"spec":{"image":"srv:1","replicas":2}}}}`)
)

// Warm opens n connections to each target, as a client that has served a burst before keeps
// them (up to its transport's MaxIdleConnsPerHost), by sending n admission reviews at once to
// each; it returns the first failure. A load warmed before a fault measures the fault, not
// the TCP and TLS handshakes its own growth would need while the fault runs.
func (l *Load) Warm(n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n*len(l.Targets()))
	for _, target := range l.Targets() {
		for range n {
			wg.Go(func() {
				if err := l.send(target+webhook.ValidatePath, admissionBody, &Sent{}); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Run sends requests until ctx is done and returns what it saw.
func (l *Load) Run(ctx context.Context) *LoadResult {
	res := &LoadResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	paths := l.Paths
	if len(paths) == 0 {
		paths = []string{webhook.ConvertPath, webhook.ValidatePath}
	}
	ticker := time.NewTicker(time.Second / time.Duration(l.Rate))
	defer ticker.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return res
		case <-ticker.C:
		}
		targets := l.Targets()
		if len(targets) == 0 {
			continue
		}
		// Every target gets every path: the path turns once the targets have gone round.
		target := targets[i%len(targets)]
		path, body := paths[i/len(targets)%len(paths)], admissionBody
		if path == webhook.ConvertPath {
			body = conversionBody
		}
		wg.Go(func() {
			start := time.Now()
			var sent Sent
			err := l.send(target+path, body, &sent)
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			res.Requests++
			res.Worst = max(res.Worst, d)
			res.Latencies = append(res.Latencies, d)
			sent.Start, sent.Target, sent.Path, sent.Latency, sent.Failed = start, target, path, d, err != nil
			res.Sent = append(res.Sent, sent)
			if err != nil {
				res.Failures++
				if len(res.Errors) < 5 {
					res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", target+path, err))
				}
			}
		})
	}
}

func (l *Load) send(url string, body []byte, sent *Sent) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	// The transport calls these from its write and read loops as well as from this goroutine,
	// possibly after Do has returned an error.
	var mu sync.Mutex
	var getConn, wrote time.Time
	var connWait, answerWait time.Duration
	locked := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		f()
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn:              func(string) { locked(func() { getConn = time.Now() }) },
		GotConn:              func(httptrace.GotConnInfo) { locked(func() { connWait = time.Since(getConn) }) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { locked(func() { wrote = time.Now() }) },
		GotFirstResponseByte: func() { locked(func() { answerWait = time.Since(wrote) }) },
	}))
	defer locked(func() { sent.Conn, sent.Answer = connWait, answerWait })
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, data)
	}
	var answer struct {
		Response struct {
			Allowed *bool `json:"allowed"`
			Result  *struct {
				Status string `json:"status"`
			} `json:"result"`
		} `json:"response"`
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		return fmt.Errorf("undecodable answer: %w", err)
	}
	if a := answer.Response.Allowed; a != nil && !*a {
		return fmt.Errorf("admission refused: %.200s", data)
	}
	if r := answer.Response.Result; answer.Response.Allowed == nil && (r == nil || r.Status != "Success") {
		return fmt.Errorf("conversion failed: %.200s", data)
	}
	return nil
}

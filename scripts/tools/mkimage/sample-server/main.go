// Command sample-server is the tiny HTTP server that Widgets run in the end-to-end tests and
// the demo. It serves:
//
//	/         a greeting naming the pod (and $MESSAGE if set)
//	/healthz  alive
//	/readyz   ready once --ready-after has passed since start (503 before)
//	/metrics  Prometheus text format: sample_server_requests_total, sample_server_ready
//	/whoami   asks the apiserver who the pod's ServiceAccount token is (a SelfSubjectReview
//	          through $KUBERNETES_SERVICE_HOST), proving in-cluster credentials work
//
// The port comes from --port, else $PORT, else 8080. It uses only the standard library so
// the image stays a single static binary.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	port := flag.Int("port", envInt("PORT", 8080), "port to listen on (default $PORT or 8080)")
	readyAfter := flag.Duration("ready-after", 0, "report not ready on /readyz until this long after start")
	flag.Parse()

	start := time.Now()
	m := &metrics{requests: map[string]int{}}
	ready := func() bool { return time.Since(start) >= *readyAfter }
	host, _ := os.Hostname()

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		m.inc("/")
		fmt.Fprintf(w, "hello from %s %s\n", host, os.Getenv("MESSAGE"))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		m.inc("/healthz")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		m.inc("/readyz")
		if !ready() {
			http.Error(w, "not ready yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		m.inc("/metrics")
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		m.write(w, ready())
	})
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		m.inc("/whoami")
		body, err := selfSubjectReview(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})

	srv := &http.Server{Addr: ":" + strconv.Itoa(*port), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Printf("sample-server listening on %s", srv.Addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

type metrics struct {
	mu       sync.Mutex
	requests map[string]int
}

func (m *metrics) inc(path string) {
	m.mu.Lock()
	m.requests[path]++
	m.mu.Unlock()
}

func (m *metrics) write(w io.Writer, ready bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	paths := make([]string, 0, len(m.requests))
	for p := range m.requests {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	fmt.Fprintln(w, "# HELP sample_server_requests_total HTTP requests served, by path.")
	fmt.Fprintln(w, "# TYPE sample_server_requests_total counter")
	for _, p := range paths {
		fmt.Fprintf(w, "sample_server_requests_total{path=%q} %d\n", p, m.requests[p])
	}
	r := 0
	if ready {
		r = 1
	}
	fmt.Fprintln(w, "# HELP sample_server_ready Whether /readyz reports ready.")
	fmt.Fprintln(w, "# TYPE sample_server_ready gauge")
	fmt.Fprintf(w, "sample_server_ready %d\n", r)
}

// selfSubjectReview posts a SelfSubjectReview with the pod's ServiceAccount token and
// returns the apiserver's answer.
func selfSubjectReview(ctx context.Context) ([]byte, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST/PORT not set: not running in a pod")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return nil, fmt.Errorf("reading the ServiceAccount token: %w", err)
	}
	caPEM, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in " + saDir + "/ca.crt")
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	url := "https://" + net.JoinHostPort(host, port) + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url,
		bytes.NewBufferString(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: %s: %s", url, resp.Status, body)
	}
	return body, nil
}

package testcerts

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// Serve starts an HTTPS server for handler on a random loopback port, with a serving
// certificate for 127.0.0.1 signed by a new CA, and stops it when the test ends. It returns
// the base URL ("https://127.0.0.1:PORT") and the CA, whose PEM goes into a caBundle.
func Serve(tb testing.TB, handler http.Handler) (string, *CA) {
	tb.Helper()
	ca := NewCA(tb, "testcerts-ca")
	cert := ca.Issue(tb, "127.0.0.1").TLSCertificate(tb)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testcerts: listen: %v", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			tb.Errorf("testcerts: server: %v", err)
		}
	})
	return "https://" + ln.Addr().String(), ca
}

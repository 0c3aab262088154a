package serving

import (
	"net/http"
	"time"
)

// Limits bound one listener: how long a client may take over its headers, its whole request
// and the answer, how long a kept-alive connection may idle, how large its headers may be, and
// how many connections it may hold open, in all and from one source address.
type Limits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	MaxConns          int
	MaxConnsPerSource int
}

// ProbeLimits are the health probes': the kubelet sends a few hundred bytes each period from
// the node's address, so a few connections per source and seconds per request are plenty.
var ProbeLimits = Limits{
	ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
	IdleTimeout: 60 * time.Second, MaxHeaderBytes: 8 << 10, MaxConns: 64, MaxConnsPerSource: 16,
}

// MetricsLimits are the metrics endpoint's: a scrape carries a bearer token (a projected
// ServiceAccount token is about 1 KiB, an OIDC token a few) and its answer may take a while
// to write on a busy node.
var MetricsLimits = Limits{
	ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 60 * time.Second,
	IdleTimeout: 120 * time.Second, MaxHeaderBytes: 16 << 10, MaxConns: 64, MaxConnsPerSource: 16,
}

// PprofLimits are pprof's, reached through kubectl port-forward: a CPU profile or a trace
// writes for as long as asked (30 s by default), so the answer may take minutes.
var PprofLimits = Limits{
	ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 5 * time.Minute,
	IdleTimeout: 60 * time.Second, MaxHeaderBytes: 8 << 10, MaxConns: 8, MaxConnsPerSource: 4,
}

// Server is an http.Server for handler within l (the connection caps are the listener's:
// Listen).
func (l Limits) Server(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

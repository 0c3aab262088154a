package serving

import (
	"fmt"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// Probes are the liveness and readiness checks, served at /healthz and /readyz (each check
// also at /readyz/<name>) as controller-runtime's manager serves them, but on a server of our
// own (NewServer with ProbeLimits).
type Probes struct {
	live, ready healthz.Handler
}

// NewProbes has no checks yet: with none, both endpoints answer ok.
func NewProbes() *Probes {
	return &Probes{live: healthz.Handler{Checks: map[string]healthz.Checker{}}, ready: healthz.Handler{Checks: map[string]healthz.Checker{}}}
}

// AddHealthzCheck adds a liveness check.
func (p *Probes) AddHealthzCheck(name string, check healthz.Checker) error {
	return add(p.live.Checks, name, check)
}

// AddReadyzCheck adds a readiness check.
func (p *Probes) AddReadyzCheck(name string, check healthz.Checker) error {
	return add(p.ready.Checks, name, check)
}

func add(checks map[string]healthz.Checker, name string, check healthz.Checker) error {
	if _, ok := checks[name]; ok {
		return fmt.Errorf("a check named %q is already added", name)
	}
	checks[name] = check
	return nil
}

// Handler serves both endpoints.
func (p *Probes) Handler() http.Handler {
	mux := http.NewServeMux()
	for path, h := range map[string]*healthz.Handler{"/healthz": &p.live, "/readyz": &p.ready} {
		mux.Handle(path, http.StripPrefix(path, h))
		mux.Handle(path+"/", http.StripPrefix(path, h))
	}
	return mux
}

package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/widgetry/widget-operator/internal/cabundle"
	"github.com/widgetry/widget-operator/internal/certtrust"
)

// caBundleDialTimeout bounds the leader's TLS handshake with each replica.
const caBundleDialTimeout = 3 * time.Second

// newCABundleMaintainer is the leader's writer of the CA bundle Secret (internal/cabundle).
func newCABundleMaintainer(m ctrl.Manager, opts Options, certificates prometheus.Gauge) *cabundle.Maintainer {
	return &cabundle.Maintainer{
		Reader: m.GetAPIReader(), Writer: m.GetClient(), Namespace: opts.Namespace,
		ServingSecret: opts.ServingSecret, BundleSecret: opts.CABundleSecret, Service: opts.WebhookServiceName,
		ServerName: opts.WebhookServiceName + "." + opts.Namespace + ".svc",
		Interval:   opts.CABundleInterval, DialTimeout: caBundleDialTimeout,
		OnPlan: func(bundle []*x509.Certificate) { certificates.Set(float64(len(bundle))) },
	}
}

// caBundlePermissions are what the bundle's writer needs in the manager's namespace, as the
// chart's Role grants them: both Secrets by name, the bundle's update, the Service's
// EndpointSlices.
func caBundlePermissions(opts Options) []authorizationv1.ResourceAttributes {
	if opts.CABundleSecret == "" {
		return nil
	}
	return []authorizationv1.ResourceAttributes{
		{Resource: "secrets", Name: opts.ServingSecret, Verb: "get"},
		{Resource: "secrets", Name: opts.CABundleSecret, Verb: "get"},
		{Resource: "secrets", Name: opts.CABundleSecret, Verb: "update"},
		{Group: "discovery.k8s.io", Resource: "endpointslices", Verb: "list"},
	}
}

// admit is the reload gate (servingCertificate.admit). A renewed chain is served when every
// caBundle the apiserver verifies with trusts it; it is held back while one does not and the
// chain served now is still trusted by all, since swapping then would turn working calls into
// failed handshakes. When the served chain is refused anyway (expired, or a bundle changed
// under it), or the bundles cannot be read (as readiness, the gate does not wait on an
// apiserver it cannot reach), the renewal is served.
func (c *trustCheck) admit(ctx context.Context, candidate *tls.Certificate) (bool, string) {
	judges, err := c.judges(ctx)
	if err != nil {
		return true, ""
	}
	now := time.Now()
	verdicts, err := certtrust.Verify(candidate, judges, now)
	if err != nil {
		return false, err.Error()
	}
	refused := refusals(verdicts)
	if len(refused) == 0 {
		return true, ""
	}
	current, err := c.cert.GetCertificate(nil)
	if err != nil {
		return true, ""
	}
	if served, err := certtrust.Verify(current, judges, now); err != nil || len(refusals(served)) > 0 {
		return true, ""
	}
	return false, strings.Join(refused, "; ")
}

// refusals are the reasons of the verdicts that refuse.
func refusals(verdicts []certtrust.Verdict) []string {
	var out []string
	for _, v := range verdicts {
		if v.Err != nil {
			out = append(out, v.Err.Error())
		}
	}
	return out
}

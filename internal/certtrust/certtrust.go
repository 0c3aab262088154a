// Package certtrust tells whether the webhook server's certificate would be accepted by the
// apiserver right now: the leaf is within its validity and verifies, for the name the
// apiserver dials, against every caBundle the apiserver judges it by (the CRD's conversion
// webhook and the admission webhook configurations). A replica whose certificate fails either
// must not take traffic: every call the apiserver routes to it would fail the TLS handshake
// (x509: certificate signed by unknown authority, or has expired).
package certtrust

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Judge is one caBundle the apiserver verifies the webhook server's certificate with, and the
// server name it verifies it for.
type Judge struct {
	// Source says where the bundle is, e.g. "CustomResourceDefinition widgets.widgetry.io".
	Source string
	// CABundle is the PEM bundle; empty means none injected yet.
	CABundle []byte
	// ServerName is the host the apiserver dials: <service>.<namespace>.svc, or the URL's host.
	ServerName string
}

// Verdict is a judge's answer: Err is nil when the certificate verifies against its bundle.
type Verdict struct {
	Source string
	Err    error
}

// Validity checks that now lies within the leaf's validity period.
func Validity(leaf *x509.Certificate, now time.Time) error {
	switch {
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("the serving certificate (serial %s) is not valid before %s", leaf.SerialNumber.Text(16), leaf.NotBefore.UTC().Format(time.RFC3339))
	case now.After(leaf.NotAfter):
		return fmt.Errorf("the serving certificate (serial %s) expired at %s", leaf.SerialNumber.Text(16), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// Leaf parses the leaf of a served chain (tls.Certificate.Leaf when set).
func Leaf(chain *tls.Certificate) (*x509.Certificate, error) {
	if chain == nil || len(chain.Certificate) == 0 {
		return nil, errors.New("no serving certificate loaded")
	}
	if chain.Leaf != nil {
		return chain.Leaf, nil
	}
	return x509.ParseCertificate(chain.Certificate[0])
}

// Verify asks every judge whether it accepts the served chain at now, as the apiserver's TLS
// client would: the leaf, with the chain's intermediates, verifies against the judge's bundle
// for its server name.
func Verify(chain *tls.Certificate, judges []Judge, now time.Time) ([]Verdict, error) {
	leaf, err := Leaf(chain)
	if err != nil {
		return nil, err
	}
	intermediates := x509.NewCertPool()
	for _, der := range chain.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("parse the served chain: %w", err)
		}
		intermediates.AddCert(c)
	}
	verdicts := make([]Verdict, 0, len(judges))
	for _, j := range judges {
		v := Verdict{Source: j.Source}
		roots := x509.NewCertPool()
		switch {
		case len(j.CABundle) == 0:
			v.Err = fmt.Errorf("%s has no caBundle yet (cert-manager's cainjector has not injected it)", j.Source)
		case !roots.AppendCertsFromPEM(j.CABundle):
			v.Err = fmt.Errorf("%s: its caBundle holds no PEM certificate", j.Source)
		default:
			_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, DNSName: j.ServerName, CurrentTime: now,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				v.Err = fmt.Errorf("%s does not trust the serving certificate (serial %s, issuer %q) for %s: %w", j.Source,
					leaf.SerialNumber.Text(16), leaf.Issuer.String(), j.ServerName, err)
			}
		}
		verdicts = append(verdicts, v)
	}
	return verdicts, nil
}

// CRDJudge is the judge of a CRD's conversion webhook; ok is false when the CRD does not
// convert through a webhook (nothing to judge by).
func CRDJudge(crd *apiextensionsv1.CustomResourceDefinition) (Judge, bool, error) {
	conv := crd.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		return Judge{}, false, nil
	}
	cc := conv.Webhook.ClientConfig
	name, err := serverName(cc.Service != nil, func() (string, string) { return cc.Service.Name, cc.Service.Namespace }, cc.URL)
	if err != nil {
		return Judge{}, false, fmt.Errorf("CustomResourceDefinition %s: %w", crd.Name, err)
	}
	return Judge{Source: "CustomResourceDefinition " + crd.Name, CABundle: cc.CABundle, ServerName: name}, true, nil
}

// AdmissionJudges are the judges of every webhook of a mutating or validating configuration.
func AdmissionJudges(kind, name string, configs []admissionregistrationv1.WebhookClientConfig) ([]Judge, error) {
	judges := make([]Judge, 0, len(configs))
	for _, cc := range configs {
		host, err := serverName(cc.Service != nil, func() (string, string) { return cc.Service.Name, cc.Service.Namespace }, cc.URL)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		judges = append(judges, Judge{Source: kind + " " + name, CABundle: cc.CABundle, ServerName: host})
	}
	return judges, nil
}

// serverName is the name the apiserver verifies: <service>.<namespace>.svc for a Service
// reference, the host of a URL.
func serverName(isService bool, service func() (name, namespace string), rawURL *string) (string, error) {
	if isService {
		name, namespace := service()
		return name + "." + namespace + ".svc", nil
	}
	if rawURL == nil {
		return "", errors.New("its webhook clientConfig has neither a service nor a URL")
	}
	u, err := url.Parse(*rawURL)
	if err != nil {
		return "", fmt.Errorf("its webhook URL: %w", err)
	}
	return u.Hostname(), nil
}

package manager

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/certtrust"
	widgetmetrics "github.com/widgetry/widget-operator/internal/metrics"
)

// trustCheck judges the certificate this replica serves as the apiserver would: within its
// validity, and trusted by the caBundle of the CRD's conversion webhook and of every webhook
// of the admission configurations named webhookConfig, for the name the apiserver dials. A
// replica failing it is not Ready (every call routed to it would fail its TLS handshake) and
// says why in its log, when the verdict changes, and in its metrics.
//
// The bundles are read from the manager's cache. When they cannot be read at all (RBAC, the
// apiserver away) the verdict is unknown and readiness does not depend on it: a replica must
// not leave the Service because the apiserver blinked.
type trustCheck struct {
	cert          *servingCertificate
	reader        client.Reader
	crdName       string
	webhookConfig string
	log           logr.Logger

	mu   sync.Mutex
	last string // the last verdict logged
}

// judges reads the bundles the apiserver judges the certificate by.
func (c *trustCheck) judges(ctx context.Context) ([]certtrust.Judge, error) {
	var judges []certtrust.Judge
	crd := &apiextensionsv1.CustomResourceDefinition{}
	switch err := c.reader.Get(ctx, client.ObjectKey{Name: c.crdName}, crd); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("read CustomResourceDefinition %s: %w", c.crdName, err)
	default:
		j, ok, err := certtrust.CRDJudge(crd)
		if err != nil {
			return nil, err
		}
		if ok {
			judges = append(judges, j)
		}
	}
	if c.webhookConfig == "" {
		return judges, nil
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	js, err := c.configJudges(ctx, "MutatingWebhookConfiguration", mutating, func() (ccs []admissionregistrationv1.WebhookClientConfig) {
		for _, w := range mutating.Webhooks {
			ccs = append(ccs, w.ClientConfig)
		}
		return ccs
	})
	if err != nil {
		return nil, err
	}
	judges = append(judges, js...)
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	js, err = c.configJudges(ctx, "ValidatingWebhookConfiguration", validating, func() (ccs []admissionregistrationv1.WebhookClientConfig) {
		for _, w := range validating.Webhooks {
			ccs = append(ccs, w.ClientConfig)
		}
		return ccs
	})
	if err != nil {
		return nil, err
	}
	judges = append(judges, js...)
	return judges, nil
}

// configJudges reads the admission configuration of kind named webhookConfig into obj and
// returns the judges of its webhooks (none when it does not exist).
func (c *trustCheck) configJudges(ctx context.Context, kind string, obj client.Object, clientConfigs func() []admissionregistrationv1.WebhookClientConfig) ([]certtrust.Judge, error) {
	switch err := c.reader.Get(ctx, client.ObjectKey{Name: c.webhookConfig}, obj); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s %s: %w", kind, c.webhookConfig, err)
	}
	return certtrust.AdmissionJudges(kind, c.webhookConfig, clientConfigs())
}

// status judges the certificate served now: validity is nil when it is within its validity;
// verdicts are nil (and unknown says why) when the bundles could not be read.
func (c *trustCheck) status(ctx context.Context) (validity error, verdicts []certtrust.Verdict, unknown error) {
	chain, err := c.cert.GetCertificate(nil)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := certtrust.Leaf(chain)
	if err != nil {
		return nil, nil, err
	}
	validity = certtrust.Validity(leaf, time.Now())
	judges, err := c.judges(ctx)
	if err != nil {
		return validity, nil, err
	}
	verdicts, err = certtrust.Verify(chain, judges, time.Now())
	return validity, verdicts, err
}

// Check is the readiness check "certificate-trust" (after "certificate": one is loaded).
func (c *trustCheck) Check(req *http.Request) error {
	if c.cert.Check(req) != nil {
		return nil // the "certificate" check says why
	}
	validity, verdicts, unknown := c.status(req.Context())
	problems := refusals(verdicts)
	if validity != nil {
		problems = append([]string{validity.Error()}, problems...)
	}
	verdict := strings.Join(problems, "; ")
	c.mu.Lock()
	changed := verdict != c.last
	c.last = verdict
	c.mu.Unlock()
	switch {
	case changed && verdict != "":
		c.log.Info("not ready: the apiserver would refuse the serving certificate", "reason", verdict)
	case changed:
		c.log.Info("the serving certificate is valid and trusted by every caBundle the apiserver uses", "bundles", len(verdicts))
	}
	if unknown != nil {
		c.log.V(1).Info("cannot read the caBundles the certificate is judged by; readiness does not wait for them", "error", unknown.Error())
	}
	if verdict != "" {
		return fmt.Errorf("%s", verdict)
	}
	return nil
}

// metricsStatus is the same judgement for the metrics (widgetmetrics.CertificateTrustCollector);
// a configuration counts as trusted when every one of its webhooks' bundles trusts it.
func (c *trustCheck) metricsStatus(ctx context.Context) widgetmetrics.CertificateStatus {
	if _, err := c.cert.GetCertificate(nil); err != nil {
		return widgetmetrics.CertificateStatus{}
	}
	validity, verdicts, unknown := c.status(ctx)
	s := widgetmetrics.CertificateStatus{Loaded: true, Valid: validity == nil, Held: c.cert.Held() != nil}
	if unknown != nil {
		return s
	}
	s.Trusted = map[string]bool{}
	for _, v := range verdicts {
		ok, seen := s.Trusted[v.Source]
		s.Trusted[v.Source] = (ok || !seen) && v.Err == nil
	}
	return s
}

//go:build envtest

package manager_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// scrapeMetrics GETs the manager's /metrics with token ("" for none) and returns the status
// code and body; a failed connection is code 0 with the error as the body (the metrics
// server may start a moment after the replica is Ready: callers poll).
func scrapeMetrics(t *testing.T, m *widgetenv.Manager, token string) (int, string) {
	t.Helper()
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed metrics certificate
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(m.MetricsPort)+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := insecure.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// readyz returns the answer of /readyz<path>: "?verbose" lists every check, "/<check>" gives
// one check's reason (the aggregate withholds reasons).
func readyz(t *testing.T, m *widgetenv.Manager, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(m.HealthPort) + "/readyz" + path)
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestReadinessJudgesTheCertificate: a replica is Ready only while the certificate it serves
// is within its validity and trusted, for the name the apiserver dials, by the caBundle of the
// CRD's conversion webhook and of both admission configurations; otherwise /readyz, the log
// and widget_webhook_certificate_{valid,trusted} say why, and it is Ready again once the
// bundle or the certificate is mended.
func TestReadinessJudgesTheCertificate(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	m := op.StartManager(t, widgetenv.ManagerOptions{})
	scraper := widgetenv.ServiceAccountToken(t, env, "prometheus", true)
	ctx := context.Background()
	other := testcerts.NewCA(t, "another CA")

	metric := func(want ...string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, "metrics "+strings.Join(want, ", "), func() error {
			code, body := scrapeMetrics(t, m, scraper)
			if code != http.StatusOK {
				return fmt.Errorf("HTTP %d: %.200s", code, body)
			}
			for _, w := range want {
				if !strings.Contains(body, w) {
					return fmt.Errorf("no %s", w)
				}
			}
			return nil
		})
	}
	readiness := func(ready bool, says string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("ready %t, saying %q", ready, says), func() error {
			code, all := readyz(t, m, "?verbose")
			_, one := readyz(t, m, "/certificate-trust")
			if (code == http.StatusOK) != ready || !strings.Contains(one, says) {
				return fmt.Errorf("HTTP %d:\n%s\ncertificate-trust: %s", code, all, one)
			}
			return nil
		})
	}
	setCRDBundle := func(bundle []byte) {
		t.Helper()
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			t.Fatal(err)
		}
		live.Spec.Conversion.Webhook.ClientConfig.CABundle = bundle
		if err := env.Client.Update(ctx, live); err != nil {
			t.Fatal(err)
		}
	}

	readiness(true, "ok")
	metric(`widget_webhook_certificate_valid 1`, `widget_webhook_certificate_trusted{source="CustomResourceDefinition widgets.widgetry.io"} 1`,
		`widget_webhook_certificate_trusted{source="MutatingWebhookConfiguration widget-operator"} 1`,
		`widget_webhook_certificate_trusted{source="ValidatingWebhookConfiguration widget-operator"} 1`)

	// The CRD's bundle names another CA only: the apiserver's conversion calls would fail.
	setCRDBundle(other.PEM)
	readiness(false, "CustomResourceDefinition widgets.widgetry.io does not trust the serving certificate")
	metric(`widget_webhook_certificate_trusted{source="CustomResourceDefinition widgets.widgetry.io"} 0`)
	if !m.LogContains("not ready: the apiserver would refuse the serving certificate") {
		t.Error("the log does not say why the replica is not ready")
	}
	// Both CAs, as in a rotation's overlap: trusted again.
	setCRDBundle(append(append([]byte{}, other.PEM...), op.CA.PEM...))
	readiness(true, "ok")

	// The validating configuration's bundle emptied: not injected yet.
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "widget-operator"}, vwc); err != nil {
		t.Fatal(err)
	}
	vwc.Webhooks[0].ClientConfig.CABundle = nil
	if err := env.Client.Update(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	readiness(false, "ValidatingWebhookConfiguration widget-operator has no caBundle yet")
	vwc.Webhooks[0].ClientConfig.CABundle = op.CA.PEM
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "widget-operator"}, vwc); err != nil {
		t.Fatal(err)
	}
	vwc.Webhooks[0].ClientConfig.CABundle = op.CA.PEM
	if err := env.Client.Update(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	readiness(true, "ok")

	// An expired certificate on disk: reloaded, and judged expired.
	op.CA.IssueValid(t, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour), "127.0.0.1", "localhost").WriteDir(t, op.CertDir)
	readiness(false, "expired at")
	metric(`widget_webhook_certificate_valid 0`)
	op.CA.Issue(t, "127.0.0.1", "localhost").WriteDir(t, op.CertDir)
	readiness(true, "ok")
	metric(`widget_webhook_certificate_valid 1`)
}

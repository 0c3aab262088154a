//go:build envtest

package manager_test

import (
	"context"
	"crypto/x509"
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

// update reads obj at key, applies mutate and writes it back.
func update(t *testing.T, c client.Client, key client.ObjectKey, obj client.Object, mutate func()) {
	t.Helper()
	if err := c.Get(context.Background(), key, obj); err != nil {
		t.Fatal(err)
	}
	mutate()
	if err := c.Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// waitMetrics polls the manager's /metrics (with token) until it holds every want.
func waitMetrics(t *testing.T, m *widgetenv.Manager, token string, want ...string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "metrics "+strings.Join(want, ", "), func() error {
		code, body := m.ScrapeMetrics(token)
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

// waitTrustReadiness polls /readyz until the replica is (not) ready and the certificate-trust
// check's answer contains says.
func waitTrustReadiness(t *testing.T, m *widgetenv.Manager, ready bool, says string) {
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

	metric := func(want ...string) { t.Helper(); waitMetrics(t, m, scraper, want...) }
	readiness := func(ready bool, says string) { t.Helper(); waitTrustReadiness(t, m, ready, says) }
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

}

func serialOf(t *testing.T, s testcerts.Serving) string {
	t.Helper()
	c := s.TLSCertificate(t)
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

// TestReloadGateHoldsUntrustedRenewals: a renewed certificate whose CA the caBundles do not
// hold yet is not served (the replica keeps presenting the trusted one, stays Ready and says
// so in its log and widget_webhook_certificate_renewal_held); it is served the moment every
// bundle trusts it. An expired renewal is held back too. A served certificate that expires
// makes the replica not Ready, and then any renewal is served (nothing to lose).
func TestReloadGateHoldsUntrustedRenewals(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	m := op.StartManager(t, widgetenv.ManagerOptions{})
	scraper := widgetenv.ServiceAccountToken(t, env, "prometheus", true)
	newCA := testcerts.NewCA(t, "the new CA")
	pool := op.CA.CertPool()
	pool.AddCert(newCA.Cert)
	served := func() string { return servedSerial(t, pool, m.WebhookPort) }
	initial := served()

	serves := func(serial, why string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, "serving serial "+serial+" ("+why+")", func() error {
			if got := served(); got != serial {
				return fmt.Errorf("serves %s", got)
			}
			return nil
		})
	}
	keepsServing := func(serial, why string) {
		t.Helper()
		// Several reloads of the files (one a second) pass; the served serial must not move.
		for range 5 {
			time.Sleep(time.Second)
			if got := served(); got != serial {
				t.Fatalf("serves %s, want %s still: %s", got, serial, why)
			}
		}
	}
	metric := func(want string) { t.Helper(); waitMetrics(t, m, scraper, want) }
	ready := func(ready bool, says string) { t.Helper(); waitTrustReadiness(t, m, ready, says) }
	bundles := func(pem []byte, admission bool) {
		t.Helper()
		crdObj := &apiextensionsv1.CustomResourceDefinition{}
		update(t, env.Client, client.ObjectKey{Name: crd.WidgetName}, crdObj, func() { crdObj.Spec.Conversion.Webhook.ClientConfig.CABundle = pem })
		if !admission {
			return
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		update(t, env.Client, client.ObjectKey{Name: "widget-operator"}, mwc, func() {
			for i := range mwc.Webhooks {
				mwc.Webhooks[i].ClientConfig.CABundle = pem
			}
		})
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		update(t, env.Client, client.ObjectKey{Name: "widget-operator"}, vwc, func() {
			for i := range vwc.Webhooks {
				vwc.Webhooks[i].ClientConfig.CABundle = pem
			}
		})
	}

	// A renewal under a CA no bundle holds: held back; the replica stays Ready.
	renewed := newCA.Issue(t, "127.0.0.1", "localhost")
	renewed.WriteDir(t, op.CertDir)
	keepsServing(initial, "the bundles do not trust the renewal's CA")
	metric("widget_webhook_certificate_renewal_held 1")
	ready(true, "ok")
	if !m.LogContains("holding back the renewed serving certificate") {
		t.Error("the log does not say the renewal is held back")
	}
	// The CRD trusts both CAs, the admission configurations not yet: still held.
	both := append(append([]byte{}, op.CA.PEM...), newCA.PEM...)
	bundles(both, false)
	keepsServing(initial, "the admission configurations do not trust the renewal's CA")
	// Every bundle trusts both: served at once.
	bundles(both, true)
	serves(serialOf(t, renewed), "every bundle trusts the renewal")
	metric("widget_webhook_certificate_renewal_held 0")
	ready(true, "ok")

	// An expired renewal is not served over a trusted certificate.
	newCA.IssueValid(t, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour), "127.0.0.1", "localhost").WriteDir(t, op.CertDir)
	keepsServing(serialOf(t, renewed), "the renewal has expired")
	metric("widget_webhook_certificate_renewal_held 1")

	// A served certificate that expires: not Ready, then any trusted renewal is served.
	shortLived := newCA.IssueValid(t, time.Now().Add(-time.Minute), time.Now().Add(8*time.Second), "127.0.0.1", "localhost")
	shortLived.WriteDir(t, op.CertDir)
	serves(serialOf(t, shortLived), "trusted and valid")
	ready(false, "expired at")
	metric("widget_webhook_certificate_valid 0")
	fresh := op.CA.Issue(t, "127.0.0.1", "localhost")
	fresh.WriteDir(t, op.CertDir)
	serves(serialOf(t, fresh), "renewed after expiry")
	ready(true, "ok")
	metric("widget_webhook_certificate_valid 1")
}

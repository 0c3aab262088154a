//go:build e2e

package cluster_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// The chart's default certificate setup (templates/issuer.yaml and certificate.yaml), through
// cert-manager's real controllers: a self-signed bootstrap Issuer, a CA Certificate, a CA
// Issuer and a serving Certificate for a webhook Service's DNS names, plus a
// ValidatingWebhookConfiguration the cainjector fills.
const certChain = `
apiVersion: v1
kind: Namespace
metadata: {name: certs}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: bootstrap, namespace: certs}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: ca, namespace: certs}
spec:
  isCA: true
  commonName: widget-e2e-ca
  secretName: ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: bootstrap, kind: Issuer, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: ca, namespace: certs}
spec: {ca: {secretName: ca}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: serving, namespace: certs}
spec:
  secretName: serving
  dnsNames: [webhook, webhook.certs, webhook.certs.svc, webhook.certs.svc.cluster.local]
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: ca, kind: Issuer, group: cert-manager.io}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: widget-e2e
  annotations: {cert-manager.io/inject-ca-from: certs/serving}
webhooks:
- name: validate.e2e.widgetry.io
  clientConfig:
    service: {namespace: certs, name: webhook, path: /validate, port: 443}
  rules:
  - {apiGroups: ["widgetry.io"], apiVersions: ["*"], operations: [CREATE], resources: [widgets]}
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
`

func TestCertManagerIssuesAndInjects(t *testing.T) {
	c := cluster.Start(t)
	c.StartCertManager(t)
	ctx := context.Background()

	manifest := filepath.Join(t.TempDir(), "chain.yaml")
	if err := os.WriteFile(manifest, []byte(certChain), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Kubectl(t, "apply", "-f", manifest)
	c.Kubectl(t, "wait", "-n", "certs", "--for=condition=Ready", "--timeout=90s",
		"issuer/bootstrap", "certificate/ca", "issuer/ca", "certificate/serving")
	t.Logf("self-signed → CA → serving chain Ready in %s", time.Since(start).Round(100*time.Millisecond))

	secret, err := c.Client.CoreV1().Secrets("certs").Get(ctx, "serving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caSecret, err := c.Client.CoreV1().Secrets("certs").Get(ctx, "ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(secret.Data["ca.crt"], caSecret.Data["tls.crt"]) {
		t.Errorf("the serving Secret's ca.crt is not the CA Certificate's tls.crt")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		t.Fatalf("no certificate in certs/serving ca.crt: %q", secret.Data["ca.crt"])
	}
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		t.Fatalf("no PEM in certs/serving tls.crt")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"webhook", "webhook.certs", "webhook.certs.svc", "webhook.certs.svc.cluster.local"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.certs.svc", Roots: roots}); err == nil {
		t.Errorf("serving certificate verifies for a name it was not issued for")
	}

	// The cainjector puts the CA into the webhook configuration within seconds.
	start = time.Now()
	var bundle []byte
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		vwc, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "widget-e2e", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		bundle = vwc.Webhooks[0].ClientConfig.CABundle
		return len(bundle) > 0, nil
	})
	if err != nil {
		t.Fatalf("caBundle of ValidatingWebhookConfiguration widget-e2e still empty after 15s: %v", err)
	}
	if !bytes.Equal(bundle, secret.Data["ca.crt"]) {
		t.Errorf("caBundle = %q, want the serving Secret's ca.crt %q", bundle, secret.Data["ca.crt"])
	}
	t.Logf("caBundle injected in %s", time.Since(start).Round(100*time.Millisecond))
}

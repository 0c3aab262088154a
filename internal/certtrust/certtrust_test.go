package certtrust

import (
	"bytes"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
)

func TestVerify(t *testing.T) {
	old, next := testcerts.NewCA(t, "old CA"), testcerts.NewCA(t, "new CA")
	served := old.Issue(t, "wo-webhook.widget-system.svc").TLSCertificate(t)
	svc := "wo-webhook.widget-system.svc"
	now := time.Now()
	tests := []struct {
		name   string
		judge  Judge
		reason string // "" when trusted
	}{
		{"its own CA", Judge{"CRD", old.PEM, svc}, ""},
		{"a bundle holding both CAs (a rotation's overlap)", Judge{"CRD", append(append([]byte{}, next.PEM...), old.PEM...), svc}, ""},
		{"only the new CA", Judge{"CRD", next.PEM, svc}, "CRD does not trust the serving certificate"},
		{"another name", Judge{"CRD", old.PEM, "other.widget-system.svc"}, "for other.widget-system.svc"},
		{"no bundle yet", Judge{"CRD", nil, svc}, "has no caBundle yet"},
		{"garbage", Judge{"CRD", []byte("not PEM"), svc}, "holds no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Verify(&served, []Judge{tt.judge}, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(v) != 1 || v[0].Source != "CRD" {
				t.Fatalf("verdicts %+v", v)
			}
			switch {
			case tt.reason == "" && v[0].Err != nil:
				t.Errorf("not trusted: %v", v[0].Err)
			case tt.reason != "" && (v[0].Err == nil || !strings.Contains(v[0].Err.Error(), tt.reason)):
				t.Errorf("verdict %v, want one saying %q", v[0].Err, tt.reason)
			}
		})
	}
	if _, err := Verify(nil, nil, now); err == nil {
		t.Error("no chain verified")
	}
}

func TestValidity(t *testing.T) {
	served := testcerts.NewCA(t, "ca").Issue(t, "x").TLSCertificate(t)
	leaf, err := Leaf(&served)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validity(leaf, time.Now()); err != nil {
		t.Errorf("now: %v", err)
	}
	if err := Validity(leaf, leaf.NotAfter.Add(time.Second)); err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Errorf("after NotAfter: %v", err)
	}
	if err := Validity(leaf, leaf.NotBefore.Add(-time.Second)); err == nil || !strings.Contains(err.Error(), "not valid before") {
		t.Errorf("before NotBefore: %v", err)
	}
	// An expired leaf is not trusted either, whatever the bundle.
	v, err := Verify(&served, []Judge{{"CRD", testcerts.NewCA(t, "other").PEM, "x"}}, leaf.NotAfter.Add(time.Hour))
	if err != nil || v[0].Err == nil {
		t.Errorf("expired leaf: %v %v", v, err)
	}
}

func TestJudgesFromObjects(t *testing.T) {
	bundle := []byte("PEM")
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "widgets.widgetry.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Conversion: &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{
				Service: &apiextensionsv1.ServiceReference{Name: "wo-webhook", Namespace: "widget-system"}, CABundle: bundle}}}}}
	j, ok, err := CRDJudge(crd)
	if err != nil || !ok || j.ServerName != "wo-webhook.widget-system.svc" || !bytes.Equal(j.CABundle, bundle) || j.Source != "CustomResourceDefinition widgets.widgetry.io" {
		t.Errorf("CRD judge %+v %t %v", j, ok, err)
	}
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	if _, ok, err := CRDJudge(crd); ok || err != nil {
		t.Errorf("a CRD without a conversion webhook judged: %t %v", ok, err)
	}
	js, err := AdmissionJudges("ValidatingWebhookConfiguration", "wo", []admissionregistrationv1.WebhookClientConfig{
		{URL: ptr.To("https://127.0.0.1:9443/validate"), CABundle: bundle}, {Service: &admissionregistrationv1.ServiceReference{Name: "s", Namespace: "n"}}})
	if err != nil || len(js) != 2 || js[0].ServerName != "127.0.0.1" || js[1].ServerName != "s.n.svc" || js[1].CABundle != nil {
		t.Errorf("admission judges %+v %v", js, err)
	}
	if _, err := AdmissionJudges("MutatingWebhookConfiguration", "wo", []admissionregistrationv1.WebhookClientConfig{{}}); err == nil {
		t.Error("a clientConfig with neither a service nor a URL judged")
	}
}

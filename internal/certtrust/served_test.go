package certtrust_test

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/widgetry/widget-operator/internal/certtrust"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
)

func TestServedHandlerAnswersWithThePresentedChain(t *testing.T) {
	ca := testcerts.NewCA(t, "served-ca")
	current := ca.Issue(t, "svc.ns.svc")
	renewal := ca.Issue(t, "svc.ns.svc")
	cur, held := current.TLSCertificate(t), renewal.TLSCertificate(t)
	var heldNow *tls.Certificate
	h := certtrust.ServedHandler(func() *tls.Certificate { return &cur }, func() *tls.Certificate { return heldNow })

	get := func(method string) (*httptest.ResponseRecorder, certtrust.Served) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, certtrust.ServedPath, nil))
		var s certtrust.Served
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
				t.Fatalf("answer is not JSON: %v: %s", err, rec.Body)
			}
		}
		return rec, s
	}
	rec, s := get(http.MethodGet)
	if rec.Code != http.StatusOK || s.Chain != string(current.CertPEM) || s.Held != "" {
		t.Fatalf("GET: %d chain %q held %q, want the current leaf and no held renewal", rec.Code, s.Chain, s.Held)
	}
	heldNow = &held
	if _, s = get(http.MethodGet); s.Chain != string(current.CertPEM) || s.Held != string(renewal.CertPEM) {
		t.Fatalf("GET with a held renewal: chain %q held %q", s.Chain, s.Held)
	}
	if rec, _ = get(http.MethodPost); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != http.MethodGet {
		t.Fatalf("POST: %d, Allow %q; want 405 naming GET", rec.Code, rec.Header().Get("Allow"))
	}
	none := certtrust.ServedHandler(func() *tls.Certificate { return nil }, func() *tls.Certificate { return nil })
	rec = httptest.NewRecorder()
	none.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, certtrust.ServedPath, nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "{\"chain\":\"\"}\n" {
		t.Fatalf("GET before a certificate is loaded: %d %q, want an empty chain", rec.Code, rec.Body)
	}
}

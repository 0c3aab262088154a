package widgetenv

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// Webhook is an in-process conversion webhook a test can take down.
type Webhook struct {
	// URL is the /convert endpoint the CRD calls; CA signed its certificate.
	URL string
	CA  *testcerts.CA
	// Down makes every request answer 503 while set.
	Down atomic.Bool
	// Lossy, a test-only conversion fault, drops the conversion-data annotation from every
	// object converted to v1alpha1 while set: the fields only v1 has are lost on the way
	// through v1alpha1.
	Lossy atomic.Bool
}

// StartAtStage boots envtest (opts.Scheme and opts.CRDs are set here) with the Widget CRD at
// stage, converting through an in-process webhook.ConversionHandler served over TLS.
func StartAtStage(tb testing.TB, stage crd.Stage, opts testenv.Options) (*testenv.Env, *Webhook) {
	tb.Helper()
	w := &Webhook{}
	handler := &webhook.ConversionHandler{}
	base, ca := testcerts.Serve(tb, http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if w.Down.Load() {
			http.Error(rw, "conversion webhook down for the test", http.StatusServiceUnavailable)
			return
		}
		if !w.Lossy.Load() {
			handler.ServeHTTP(rw, req)
			return
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(rec.Code)
		_, _ = rw.Write(dropConversionData(tb, rec.Body.Bytes()))
	}))
	w.URL, w.CA = base+webhook.ConvertPath, ca
	c := crd.WithWebhookConversion(crd.Widget(), apiextensionsv1.WebhookClientConfig{URL: ptr.To(w.URL), CABundle: ca.PEM})
	if err := crd.ApplyStageFlags(c, stage); err != nil {
		tb.Fatal(err)
	}
	opts.Scheme = scheme.New()
	opts.CRDs = []*apiextensionsv1.CustomResourceDefinition{c}
	return testenv.Start(tb, opts), w
}

// dropConversionData removes the conversion-data annotation from every v1alpha1 object of a
// ConversionReview response (the Lossy fault).
func dropConversionData(tb testing.TB, body []byte) []byte {
	review := &apiextensionsv1.ConversionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Response == nil {
		return body
	}
	for i, raw := range review.Response.ConvertedObjects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil || u.GetAPIVersion() != "widgetry.io/v1alpha1" {
			continue
		}
		unstructured.RemoveNestedField(u.Object, "metadata", "annotations", conversion.DataAnnotation)
		out, err := u.MarshalJSON()
		if err != nil {
			tb.Errorf("the Lossy fault: %v", err)
			return body
		}
		review.Response.ConvertedObjects[i].Raw = out
	}
	out, err := json.Marshal(review)
	if err != nil {
		tb.Errorf("the Lossy fault: %v", err)
		return body
	}
	return out
}

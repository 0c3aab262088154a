package widgetenv

import (
	"net/http"
	"sync/atomic"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"

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
		handler.ServeHTTP(rw, req)
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

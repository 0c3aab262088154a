package upgrade

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"

	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
)

// TestProbeBuildConversion: this build's conversion passes both round trips; a build that
// drops a field only v1 can express (spec.paused) on the way back is caught.
func TestProbeBuildConversion(t *testing.T) {
	cfg := WidgetConfig()
	if err := ProbeBuildConversion(t.Context(), cfg, "widgetry.io", "Widget"); err != nil {
		t.Fatalf("this build: %v", err)
	}
	good := cfg.BuildConverter
	cfg.BuildConverter = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		good.ServeHTTP(rec, r)
		body, _ := io.ReadAll(rec.Result().Body)
		// A lossy build: the conversion-data annotation never makes it back.
		body = bytes.ReplaceAll(body, []byte(`"widgetry.io/conversion-data"`), []byte(`"widgetry.io/dropped"`))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
	err := ProbeBuildConversion(t.Context(), cfg, "widgetry.io", "Widget")
	if err == nil || !strings.Contains(err.Error(), "lost data in a round trip v1 -> v1alpha1 -> v1") {
		t.Fatalf("a lossy build: %v", err)
	}
}

// TestProbeThroughTheServiceProxy: without --webhook-url the probe posts its ConversionReviews
// to the apiserver's service proxy path of the CRD's webhook Service, with the kubeconfig's
// credentials, keeping a path prefix of the apiserver's address (a proxy in front of it).
// The e2e test TestOnCallFromALaptop runs it against a real apiserver.
func TestProbeThroughTheServiceProxy(t *testing.T) {
	cfg := WidgetConfig()
	var paths []string
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		if r.Header.Get("Authorization") != "Bearer on-call" {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		cfg.BuildConverter.ServeHTTP(w, r)
	}))
	defer apiserver.Close()
	live := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Group: "widgetry.io", Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget"},
		Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig: &apiextensionsv1.WebhookClientConfig{CABundle: testcerts.NewCA(t, "probe-ca").PEM,
				Service: &apiextensionsv1.ServiceReference{Namespace: "widget-system", Name: "widget-operator-webhook", Port: ptr[int32](443), Path: ptr("/convert")}}}}}}
	if err := ProbeConversion(t.Context(), live, cfg, ProbeOptions{APIServer: &rest.Config{Host: apiserver.URL + "/clusters/c1", BearerToken: "on-call"}}); err != nil {
		t.Fatalf("probe through the service proxy: %v", err)
	}
	want := "POST /clusters/c1/api/v1/namespaces/widget-system/services/https:widget-operator-webhook:443/proxy/convert"
	if len(paths) != 4 || paths[0] != want {
		t.Fatalf("requests %q, want 4 of %q", paths, want)
	}
	err := ProbeConversion(t.Context(), live, cfg, ProbeOptions{APIServer: &rest.Config{Host: apiserver.URL, BearerToken: "someone-else"}})
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("probe with credentials the apiserver refuses: %v, want HTTP 401 named", err)
	}
}

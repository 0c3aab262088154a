package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	crconversion "sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/scheme"
)

// stockHandler is controller-runtime's own conversion webhook over the same types and the
// same conversion functions: the alternative this handler is measured against.
func stockHandler(tb testing.TB) http.Handler {
	tb.Helper()
	s := scheme.New()
	converter, err := crconversion.NewHubSpokeConverter(&v1.Widget{},
		crconversion.NewSpokeConverter(&v1alpha1.Widget{}, conversion.ConvertWidgetFromHub, conversion.ConvertWidgetToHub))(s)
	if err != nil {
		tb.Fatal(err)
	}
	registry := crconversion.NewRegistry()
	if err := registry.RegisterConverter(schema.GroupKind{Group: "widgetry.io", Kind: "Widget"}, converter); err != nil {
		tb.Fatal(err)
	}
	return crconversion.NewWebhookHandler(s, registry)
}

// floorHandler is the floor any Go handler pays: encoding/json decodes the envelope and
// every object into its source type and encodes them back, converting nothing.
func floorHandler(w http.ResponseWriter, r *http.Request) {
	var review struct {
		Request struct {
			UID               string            `json:"uid"`
			DesiredAPIVersion string            `json:"desiredAPIVersion"`
			Objects           []json.RawMessage `json:"objects"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out := make([]any, len(review.Request.Objects))
	for i, raw := range review.Request.Objects {
		var obj v1alpha1.Widget
		if review.Request.DesiredAPIVersion == "widgetry.io/v1alpha1" {
			var hub v1.Widget
			if err := json.Unmarshal(raw, &hub); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			out[i] = &hub
			continue
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out[i] = &obj
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"response": map[string]any{"uid": review.Request.UID, "convertedObjects": out}})
}

// benchReviews returns a ConversionReview of n realistic v1alpha1 Widgets to v1, and the
// same Widgets as v1 to v1alpha1.
func benchReviews(tb testing.TB, n int) (toV1, toV1alpha1 []byte) {
	spokes := make([]any, n)
	hubs := make([]any, n)
	for i := range n {
		s := conversiontest.RealisticWidget("bench", i)
		spokes[i] = s
		h := &v1.Widget{}
		if err := conversion.ConvertWidgetToHub(context.Background(), s.DeepCopy(), h); err != nil {
			tb.Fatal(err)
		}
		hubs[i] = h
	}
	return reviewBody(tb, "bench", "widgetry.io/v1", spokes...), reviewBody(tb, "bench", "widgetry.io/v1alpha1", hubs...)
}

// BenchmarkConvertReview measures one ConversionReview of 10,000 Widgets each way for
// (a) this handler, (b) controller-runtime's stock handler and (c) the encoding/json floor.
// scripts/bench-ratios.sh prints a/b and a/c from its output.
func BenchmarkConvertReview(b *testing.B) {
	toV1, toV1alpha1 := benchReviews(b, 10000)
	handlers := []struct {
		name string
		h    http.Handler
	}{
		{"handler=widget", &ConversionHandler{}},
		{"handler=controller-runtime", stockHandler(b)},
		{"handler=encoding-json-floor", http.HandlerFunc(floorHandler)},
	}
	for _, dir := range []struct {
		name string
		body []byte
	}{{"to=v1", toV1}, {"to=v1alpha1", toV1alpha1}} {
		for _, h := range handlers {
			b.Run(dir.name+"/"+h.name, func(b *testing.B) {
				b.SetBytes(int64(len(dir.body)))
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(dir.body))
					req.Header.Set("Content-Type", "application/json")
					rec := httptest.NewRecorder()
					h.h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("%s: %d %.300s", h.name, rec.Code, rec.Body.String())
					}
				}
			})
		}
	}
}

// TestStockHandlerAgrees: controller-runtime's handler over the same functions produces the
// same Widgets, which makes it a fair baseline and checks the wire path once more.
func TestStockHandlerAgrees(t *testing.T) {
	toV1, toV1alpha1 := benchReviews(t, 50)
	for _, body := range [][]byte{toV1, toV1alpha1} {
		_, _, ours := post(t, &ConversionHandler{}, body)
		_, _, stock := post(t, stockHandler(t), body)
		if ours.Response.Result.Status != "Success" || stock.Response.Result.Status != "Success" {
			t.Fatalf("ours %+v, stock %+v", ours.Response.Result, stock.Response.Result)
		}
		for i := range ours.Response.ConvertedObjects {
			a, b := decodeAny(t, ours.Response.ConvertedObjects[i].Raw), decodeAny(t, stock.Response.ConvertedObjects[i].Raw)
			if d := conversiontest.Diff(a, b); d != "" {
				t.Fatalf("object %d differs between this handler and controller-runtime's %s", i, d)
			}
		}
	}
}

func decodeAny(t testing.TB, raw []byte) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	// controller-runtime re-encodes through the typed object: drop what only differs in form.
	delete(m["metadata"].(map[string]any), "creationTimestamp")
	return m
}

package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	apix "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	crconversion "sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv/memprobe"
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
// every object into its source type and encodes them back, converting nothing. It answers a
// whole ConversionReview, as the apiserver wants it, so that the benchmark checks its answer
// as it checks the handlers'.
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
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
		"response": map[string]any{"uid": review.Request.UID, "result": map[string]any{"status": metav1.StatusSuccess}, "convertedObjects": out}})
}

// benchReviews returns a ConversionReview of n realistic v1alpha1 Widgets to v1, and the
// same Widgets as v1 to v1alpha1. Every fourth v1 Widget holds what v1alpha1 cannot express
// (spec.paused, or a timeout that is not whole seconds), so converting it to v1alpha1 writes
// the widgetry.io/conversion-data annotation into its metadata, and its v1alpha1 form in the
// other review carries that annotation for the way back: the re-encode path, where metadata
// does not pass through untouched.
func benchReviews(tb testing.TB, n int) (toV1, toV1alpha1 []byte) {
	tb.Helper()
	ctx := context.Background()
	spokes := make([]any, n)
	hubs := make([]any, n)
	for i := range n {
		s := conversiontest.RealisticWidget("bench", i)
		h := &v1.Widget{}
		if err := conversion.ConvertWidgetToHub(ctx, s.DeepCopy(), h); err != nil {
			tb.Fatal(err)
		}
		if i%4 == 3 {
			if i%8 == 3 {
				h.Spec.Paused = ptr.To(true)
			} else {
				h.Spec.Timeout = ptr.To(fmt.Sprintf("%d.5s", i%100+1))
			}
			s = &v1alpha1.Widget{}
			if err := conversion.ConvertWidgetFromHub(ctx, h.DeepCopy(), s); err != nil {
				tb.Fatal(err)
			}
			if _, ok := s.Annotations[conversion.DataAnnotation]; !ok {
				tb.Fatalf("widget %d: v1alpha1 form has no %s annotation", i, conversion.DataAnnotation)
			}
		}
		spokes[i], hubs[i] = s, h
	}
	return reviewBody(tb, "bench", "widgetry.io/v1", spokes...), reviewBody(tb, "bench", "widgetry.io/v1alpha1", hubs...)
}

// serveReview sends one ConversionReview to h as the webhook server would, into a
// countingWriter (like a connection, it keeps no copy of the answer: an
// httptest.ResponseRecorder would hold all of it and grow it by doubling), and fails the
// benchmark unless h answers 200. That is all the timed loop can afford to check, and alone
// it proves little: checkReview checks the answer itself once per benchmark.
func serveReview(b *testing.B, name string, h http.Handler, body []byte) {
	req := httptest.NewRequest(http.MethodPost, ConvertPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := newCountingWriter()
	h.ServeHTTP(w, req)
	mustSucceed(b, name, w)
}

func mustSucceed(b *testing.B, name string, w *countingWriter) {
	if w.code != http.StatusOK {
		b.Fatalf("%s: %d %.300s", name, w.code, w.head)
	}
}

// checkReview sends body, a ConversionReview of objects objects, to h once and fails the
// benchmark unless the answer is a ConversionReview whose result is Success with every object
// converted. HTTP 200 is not enough: controller-runtime's handler answers a failed conversion
// with 200 and a Failure result, and a benchmark of failures would time the shortest way to
// give up. It keeps the whole answer, so it runs outside the timed loop.
func checkReview(b *testing.B, name string, h http.Handler, body []byte, objects int) {
	b.Helper()
	req := httptest.NewRequest(http.MethodPost, ConvertPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var review apix.ConversionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || review.Response == nil {
		b.Fatalf("%s: HTTP %d, the answer is not a ConversionReview with a response (%v): %.300s", name, rec.Code, err, rec.Body.Bytes())
	}
	r := review.Response
	if r.Result.Status != metav1.StatusSuccess || len(r.ConvertedObjects) != objects {
		b.Fatalf("%s: HTTP %d, result status %q, message %q; %d objects converted of %d sent",
			name, rec.Code, r.Result.Status, r.Result.Message, len(r.ConvertedObjects), objects)
	}
}

// BenchmarkConvertReview measures one ConversionReview of 10,000 Widgets each way for
// (a) this handler, (b) controller-runtime's stock handler and (c) the encoding/json floor.
// Besides time, each sub-benchmark reports the bytes allocated per byte of the body
// (alloc-B/payload-B, over all iterations) and the peak heap of one more review, sampled
// (peak-heap-B, and peak-heap/body). `make bench` runs it at -cpu 1 (the algorithm alone)
// and on all cores (the handler splits a large review over them); scripts/bench-ratios.sh
// prints a/b and a/c, and the memory ratios, per -cpu setting. Each sub-benchmark first checks
// its handler's answer (checkReview): a handler that fails the review is not measured.
func BenchmarkConvertReview(b *testing.B) {
	const widgets = 10000
	toV1, toV1alpha1 := benchReviews(b, widgets)
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
				// Before b.Loop's first call, which resets the timer and the allocation counts:
				// not measured, and (with b.Loop) run once per -count.
				checkReview(b, h.name, h.h, dir.body, widgets)
				b.SetBytes(int64(len(dir.body)))
				b.ReportAllocs()
				allocated := memprobe.Allocated()
				for b.Loop() {
					serveReview(b, h.name, h.h, dir.body)
				}
				// The timer is stopped once b.Loop returns false: neither the reading nor the
				// sampled review below counts in ns/op.
				b.ReportMetric(float64(memprobe.Allocated()-allocated)/float64(b.N)/float64(len(dir.body)), "alloc-B/payload-B")
				w, peak := serveMeasured(h.h, ConvertPath, dir.body)
				mustSucceed(b, h.name, w)
				b.ReportMetric(float64(peak.Bytes), "peak-heap-B")
				b.ReportMetric(float64(peak.Bytes)/float64(len(dir.body)), "peak-heap/body")
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

package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apix "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
)

// reviewBody builds a ConversionReview request for objs (Go values or raw JSON strings).
func reviewBody(t testing.TB, uid, desired string, objs ...any) []byte {
	t.Helper()
	raws := make([]json.RawMessage, len(objs))
	for i, o := range objs {
		switch o := o.(type) {
		case string:
			raws[i] = json.RawMessage(o)
		default:
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			raws[i] = b
		}
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
		"request": map[string]any{"uid": uid, "desiredAPIVersion": desired, "objects": raws},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends body to h and decodes the ConversionReview answer (nil when the status is not 200).
func post(t testing.TB, h http.Handler, body []byte) (int, string, *apix.ConversionReview) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return rec.Code, rec.Body.String(), nil
	}
	var review apix.ConversionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil {
		t.Fatalf("response is not a ConversionReview: %v\n%s", err, rec.Body.String())
	}
	return rec.Code, rec.Body.String(), &review
}

func decodeObject[T any](t testing.TB, raw []byte) *T {
	t.Helper()
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("decode converted object: %v\n%s", err, raw)
	}
	return &out
}

func TestConvertReviewEnvelope(t *testing.T) {
	h := &ConversionHandler{}
	a := conversiontest.RealisticWidget("ns", 1)
	b := conversiontest.RealisticWidget("ns", 2)
	_, _, review := post(t, h, reviewBody(t, "uid-123", "widgetry.io/v1", a, b))
	resp := review.Response
	if resp.UID != "uid-123" {
		t.Errorf("uid %q, want the request's uid-123", resp.UID)
	}
	if resp.Result.Status != "Success" || len(resp.ConvertedObjects) != 2 {
		t.Fatalf("result %+v with %d objects, want Success with 2", resp.Result, len(resp.ConvertedObjects))
	}
	if review.APIVersion != "apiextensions.k8s.io/v1" || review.Kind != "ConversionReview" {
		t.Errorf("envelope %s %s", review.APIVersion, review.Kind)
	}
	for i, want := range []*v1alpha1.Widget{a, b} {
		got := decodeObject[v1.Widget](t, resp.ConvertedObjects[i].Raw)
		if got.APIVersion != "widgetry.io/v1" || got.Kind != "Widget" || got.Name != want.Name {
			t.Errorf("object %d: %s %s %s, want widgetry.io/v1 Widget %s in request order", i, got.APIVersion, got.Kind, got.Name, want.Name)
		}
	}
}

// TestConvertMatchesTypedConversion: the wire path and the typed functions (used by the
// controller and the stock handler) give the same objects, for thousands of random Widgets.
func TestConvertMatchesTypedConversion(t *testing.T) {
	f := conversiontest.NewFiller(3)
	h := &ConversionHandler{}
	for i := range 2000 {
		in := &v1alpha1.Widget{}
		f.Fill(in)
		in.APIVersion, in.Kind = "widgetry.io/v1alpha1", "Widget"
		_, _, review := post(t, h, reviewBody(t, "u", "widgetry.io/v1", in))
		if review.Response.Result.Status != "Success" {
			t.Fatalf("iteration %d: %s", i, review.Response.Result.Message)
		}
		gotHub := decodeObject[v1.Widget](t, review.Response.ConvertedObjects[0].Raw)
		wantHub := &v1.Widget{}
		if err := conversion.ConvertWidgetToHub(context.Background(), roundTripJSON(t, in), wantHub); err != nil {
			t.Fatal(err)
		}
		if d := conversiontest.Diff(wantHub, gotHub); d != "" {
			t.Fatalf("iteration %d: webhook and typed conversion to v1 differ %s", i, d)
		}

		_, _, review = post(t, h, reviewBody(t, "u", "widgetry.io/v1alpha1", gotHub))
		if review.Response.Result.Status != "Success" {
			t.Fatalf("iteration %d back: %s", i, review.Response.Result.Message)
		}
		back := decodeObject[v1alpha1.Widget](t, review.Response.ConvertedObjects[0].Raw)
		if d := conversiontest.Diff(roundTripJSON(t, in), back); d != "" {
			t.Fatalf("iteration %d: v1alpha1 -> v1 -> v1alpha1 through the webhook changed the object %s", i, d)
		}
	}
}

// roundTripJSON is what the apiserver would hold: the object after JSON encoding (which, for
// example, drops empty annotation maps and time below a second).
func roundTripJSON[T any](t testing.TB, in *T) *T {
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObject[T](t, b)
}

func TestConvertHazards(t *testing.T) {
	h := &ConversionHandler{}
	spokeJSON := `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"%s","namespace":"ns"},"spec":%s}`
	hubJSON := `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"%s","namespace":"ns"},"spec":%s}`
	for _, tc := range []struct {
		name    string
		desired string
		objects []any
		// check inspects the converted objects of a successful review.
		check func(t *testing.T, objs []json.RawMessage)
		// failure, when set, is what the Failure message must say.
		failure []string
	}{
		{name: "missing replicas stays missing, explicit zero stays zero", desired: "widgetry.io/v1",
			objects: []any{fmt.Sprintf(spokeJSON, "a", `{"image":"i"}`), fmt.Sprintf(spokeJSON, "b", `{"image":"i","replicas":0}`)},
			check: func(t *testing.T, objs []json.RawMessage) {
				if a := decodeObject[v1.Widget](t, objs[0]); a.Spec.Size != nil {
					t.Errorf("unset replicas became size %d", *a.Spec.Size)
				}
				if b := decodeObject[v1.Widget](t, objs[1]); b.Spec.Size == nil || *b.Spec.Size != 0 {
					t.Errorf("explicit 0 became %v", b.Spec.Size)
				}
			}},
		{name: "empty list stays empty, unset stays unset", desired: "widgetry.io/v1",
			objects: []any{fmt.Sprintf(spokeJSON, "a", `{"image":"i","endpoints":[]}`), fmt.Sprintf(spokeJSON, "b", `{"image":"i"}`)},
			check: func(t *testing.T, objs []json.RawMessage) {
				if !strings.Contains(string(objs[0]), `"endpoints":{}`) {
					t.Errorf("empty list did not become an empty map: %s", objs[0])
				}
				if strings.Contains(string(objs[1]), `endpoints`) {
					t.Errorf("unset list became something: %s", objs[1])
				}
			}},
		{name: "to v1alpha1: each object's endpoints alone, an empty map stays empty, unset stays unset", desired: "widgetry.io/v1alpha1",
			// One review: the handler decodes every object's endpoints into the same map.
			objects: []any{fmt.Sprintf(hubJSON, "a", `{"image":"i","endpoints":{"http":{"port":80}}}`), fmt.Sprintf(hubJSON, "b", `{"image":"i"}`),
				fmt.Sprintf(hubJSON, "c", `{"image":"i","endpoints":{}}`), fmt.Sprintf(hubJSON, "d", `{"image":"i","endpoints":null}`),
				fmt.Sprintf(hubJSON, "e", `{"image":"i","endpoints":{"admin":{"port":9090}}}`)},
			check: func(t *testing.T, objs []json.RawMessage) {
				if a := decodeObject[v1alpha1.Widget](t, objs[0]); len(a.Spec.Endpoints) != 1 || a.Spec.Endpoints[0].Name != "http" {
					t.Errorf("a: endpoints %+v, want http only", a.Spec.Endpoints)
				}
				for _, i := range []int{1, 3} {
					if strings.Contains(string(objs[i]), `endpoints`) {
						t.Errorf("unset or null endpoints became something: %s", objs[i])
					}
				}
				if !strings.Contains(string(objs[2]), `"endpoints":[]`) {
					t.Errorf("an empty map did not become an empty list: %s", objs[2])
				}
				if e := decodeObject[v1alpha1.Widget](t, objs[4]); len(e.Spec.Endpoints) != 1 || e.Spec.Endpoints[0].Name != "admin" {
					t.Errorf("e: endpoints %+v, want admin only", e.Spec.Endpoints)
				}
			}},
		{name: "fractional timeout and paused go to the annotation", desired: "widgetry.io/v1alpha1",
			objects: []any{fmt.Sprintf(hubJSON, "a", `{"image":"i","timeout":"1.5s","paused":true}`)},
			check: func(t *testing.T, objs []json.RawMessage) {
				w := decodeObject[v1alpha1.Widget](t, objs[0])
				if *w.Spec.TimeoutSeconds != 2 || w.Annotations[conversion.DataAnnotation] != `{"timeout":"1.5s","paused":true}` {
					t.Errorf("got timeoutSeconds %d, annotations %v", *w.Spec.TimeoutSeconds, w.Annotations)
				}
			}},
		{name: "stale annotation loses to a v1alpha1 edit", desired: "widgetry.io/v1",
			objects: []any{`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","annotations":{"widgetry.io/conversion-data":"{\"timeout\":\"1.5s\",\"paused\":true}"}},"spec":{"image":"i","timeoutSeconds":7}}`},
			check: func(t *testing.T, objs []json.RawMessage) {
				w := decodeObject[v1.Widget](t, objs[0])
				if *w.Spec.Timeout != "7s" || !ptr.Deref(w.Spec.Paused, false) || w.Annotations != nil {
					t.Errorf("got timeout %s paused %v annotations %v, want 7s, true, none", *w.Spec.Timeout, w.Spec.Paused, w.Annotations)
				}
			}},
		{name: "metadata passes through, unknown metadata fields included", desired: "widgetry.io/v1",
			objects: []any{`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"42","generation":3,"labels":{"l":"v"},"finalizers":["widgetry.io/catalog-cleanup"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u2"}],"managedFields":[{"manager":"m","operation":"Update","apiVersion":"widgetry.io/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}],"futureField":{"x":1}},"spec":{"image":"i"},"unknownTopLevel":1}`},
			check: func(t *testing.T, objs []json.RawMessage) {
				for _, want := range []string{`"uid":"u1"`, `"resourceVersion":"42"`, `"generation":3`, `"labels":{"l":"v"}`, `"finalizers":["widgetry.io/catalog-cleanup"]`, `"ownerReferences":[`, `"managedFields":[`, `"futureField":{"x":1}`} {
					if !strings.Contains(string(objs[0]), want) {
						t.Errorf("metadata lost %s: %s", want, objs[0])
					}
				}
			}},
		{name: "unknown spec fields are dropped (the apiserver prunes them first)", desired: "widgetry.io/v1",
			objects: []any{fmt.Sprintf(spokeJSON, "a", `{"image":"i","bogus":true}`)},
			check: func(t *testing.T, objs []json.RawMessage) {
				if strings.Contains(string(objs[0]), "bogus") {
					t.Errorf("unknown field survived: %s", objs[0])
				}
			}},
		{name: "status converts", desired: "widgetry.io/v1",
			objects: []any{`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i"},"status":{"availableReplicas":2,"observedGeneration":5,"conditions":[{"type":"Ready","status":"True","reason":"Available","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`},
			check: func(t *testing.T, objs []json.RawMessage) {
				w := decodeObject[v1.Widget](t, objs[0])
				if w.Status.AvailableReplicas != 2 || w.Status.ObservedGeneration != 5 || len(w.Status.Conditions) != 1 {
					t.Errorf("status %+v", w.Status)
				}
			}},
		{name: "same version comes back byte for byte", desired: "widgetry.io/v1",
			objects: []any{fmt.Sprintf(hubJSON, "a", `{"zz":1,"timeout":"1m","image":"i"}`)},
			check: func(t *testing.T, objs []json.RawMessage) {
				if string(objs[0]) != fmt.Sprintf(hubJSON, "a", `{"zz":1,"timeout":"1m","image":"i"}`) {
					t.Errorf("same-version object changed: %s", objs[0])
				}
			}},
		{name: "a batch of mixed versions", desired: "widgetry.io/v1alpha1",
			objects: []any{fmt.Sprintf(hubJSON, "a", `{"image":"i","size":3}`), fmt.Sprintf(spokeJSON, "b", `{"image":"i","replicas":4}`), fmt.Sprintf(hubJSON, "c", `{"image":"i","size":5}`)},
			check: func(t *testing.T, objs []json.RawMessage) {
				for i, want := range []int32{3, 4, 5} {
					w := decodeObject[v1alpha1.Widget](t, objs[i])
					if w.APIVersion != "widgetry.io/v1alpha1" || *w.Spec.Replicas != want {
						t.Errorf("object %d: %s replicas %d, want v1alpha1 %d", i, w.APIVersion, *w.Spec.Replicas, want)
					}
				}
			}},
		{name: "duplicate endpoint names fail the whole review", desired: "widgetry.io/v1",
			objects: []any{fmt.Sprintf(spokeJSON, "ok", `{"image":"i"}`), fmt.Sprintf(spokeJSON, "dup", `{"image":"i","endpoints":[{"name":"a","port":1},{"name":"a","port":2}]}`)},
			failure: []string{"object 2 (ns/dup", `duplicate endpoint name "a"`}},
		{name: "an unsupported desired version", desired: "widgetry.io/v2",
			objects: []any{fmt.Sprintf(spokeJSON, "a", `{"image":"i"}`)},
			failure: []string{`desiredAPIVersion "widgetry.io/v2" is not supported`}},
		{name: "an object of another kind", desired: "widgetry.io/v1",
			objects: []any{`{"apiVersion":"widgetry.io/v1alpha1","kind":"Gadget","metadata":{"name":"g"}}`},
			failure: []string{`kind "Gadget"`}},
		{name: "a malformed object in the middle of a batch", desired: "widgetry.io/v1",
			objects: []any{fmt.Sprintf(spokeJSON, "a", `{"image":"i"}`), `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"bad","namespace":"ns"},"spec":{"replicas":"three"}}`, fmt.Sprintf(spokeJSON, "c", `{"image":"i"}`)},
			failure: []string{"object 2 (ns/bad", "spec"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, review := post(t, h, reviewBody(t, "u-"+tc.name, tc.desired, tc.objects...))
			resp := review.Response
			if string(resp.UID) != "u-"+tc.name {
				t.Errorf("uid %q not copied", resp.UID)
			}
			if tc.failure != nil {
				if resp.Result.Status != "Failure" || len(resp.ConvertedObjects) != 0 {
					t.Fatalf("got %s with %d objects, want Failure with none", resp.Result.Status, len(resp.ConvertedObjects))
				}
				for _, w := range tc.failure {
					if !strings.Contains(resp.Result.Message, w) {
						t.Errorf("message %q does not mention %q", resp.Result.Message, w)
					}
				}
				return
			}
			if resp.Result.Status != "Success" || len(resp.ConvertedObjects) != len(tc.objects) {
				t.Fatalf("got %s (%s) with %d objects, want Success with %d", resp.Result.Status, resp.Result.Message, len(resp.ConvertedObjects), len(tc.objects))
			}
			objs := make([]json.RawMessage, len(resp.ConvertedObjects))
			for i, o := range resp.ConvertedObjects {
				objs[i] = o.Raw
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(o.Raw); err != nil {
					t.Fatalf("object %d: %v", i, err)
				}
				if u.GetAPIVersion() != tc.desired || u.GetKind() != "Widget" {
					t.Errorf("object %d: %s %s, want %s Widget", i, u.GetAPIVersion(), u.GetKind(), tc.desired)
				}
			}
			tc.check(t, objs)
		})
	}
}

func TestConvertRejectsBadRequests(t *testing.T) {
	valid := reviewBody(t, "u", "widgetry.io/v1", conversiontest.RealisticWidget("ns", 0))
	for _, tc := range []struct {
		name        string
		method      string
		contentType string
		body        []byte
		limit       int64
		wantStatus  int
		wantText    string
	}{
		{"GET", http.MethodGet, "application/json", nil, 0, http.StatusMethodNotAllowed, "POST"},
		{"wrong content type", http.MethodPost, "text/plain", valid, 0, http.StatusUnsupportedMediaType, "application/json"},
		{"missing content type", http.MethodPost, "", valid, 0, http.StatusUnsupportedMediaType, "application/json"},
		{"malformed JSON", http.MethodPost, "application/json", []byte(`{"request":`), 0, http.StatusBadRequest, "not a ConversionReview"},
		{"not a review", http.MethodPost, "application/json", []byte(`{"apiVersion":"v1","kind":"Pod"}`), 0, http.StatusBadRequest, "ConversionReview"},
		{"review without a request", http.MethodPost, "application/json", []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}`), 0, http.StatusBadRequest, "with a request"},
		{"body over the limit", http.MethodPost, "application/json", valid, 100, http.StatusRequestEntityTooLarge, "over 100 bytes"},
		{"charset parameter accepted", http.MethodPost, "application/json; charset=utf-8", valid, 0, http.StatusOK, "Success"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &ConversionHandler{MaxBodyBytes: tc.limit}
			req := httptest.NewRequest(tc.method, "/convert", bytes.NewReader(tc.body))
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus || !strings.Contains(rec.Body.String(), tc.wantText) {
				t.Errorf("got %d %q, want %d mentioning %q", rec.Code, rec.Body.String(), tc.wantStatus, tc.wantText)
			}
		})
	}
}

func TestDefaultBodyLimitHoldsLargeLists(t *testing.T) {
	objs := make([]any, 10000)
	for i := range objs {
		objs[i] = conversiontest.RealisticWidget("ns", i)
	}
	body := reviewBody(t, "big", "widgetry.io/v1", objs...)
	code, text, review := post(t, &ConversionHandler{}, body)
	if code != http.StatusOK || review.Response.Result.Status != "Success" || len(review.Response.ConvertedObjects) != len(objs) {
		t.Fatalf("a %d-byte review of %d objects: %d %.200s", len(body), len(objs), code, text)
	}
}

// TestLargeReviewFailsAtTheFirstBadObject: a review split over several goroutines still
// answers with the first failing object in request order and no objects at all.
func TestLargeReviewFailsAtTheFirstBadObject(t *testing.T) {
	objs := make([]any, 1000)
	for i := range objs {
		objs[i] = conversiontest.RealisticWidget("ns", i)
	}
	objs[700] = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"dup-a","namespace":"ns"},"spec":{"image":"i","endpoints":[{"name":"a","port":1},{"name":"a","port":2}]}}`
	objs[900] = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"dup-b","namespace":"ns"},"spec":{"image":"i","endpoints":[{"name":"b","port":1},{"name":"b","port":2}]}}`
	_, _, review := post(t, &ConversionHandler{}, reviewBody(t, "u", "widgetry.io/v1", objs...))
	msg := review.Response.Result.Message
	if review.Response.Result.Status != "Failure" || len(review.Response.ConvertedObjects) != 0 || !strings.Contains(msg, "object 701 (ns/dup-a") {
		t.Fatalf("got %s with %d objects: %q; want a Failure naming object 701, ns/dup-a", review.Response.Result.Status, len(review.Response.ConvertedObjects), msg)
	}
}

// TestPanicInAWorkerFailsTheReviewOnly: a panic while converting one object, on the single
// goroutine of a small review or on one of several of a large one (where net/http's own
// recovery does not reach), fails that review naming the object, and the handler goes on to
// answer the next review.
func TestPanicInAWorkerFailsTheReviewOnly(t *testing.T) {
	stock := convertOne
	t.Cleanup(func() { convertOne = stock })
	convertOne = func(buf *objectWriter, desired string, raw []byte) (string, *conversionError) {
		if bytes.Contains(raw, []byte(`"name":"boom"`)) {
			panic("injected")
		}
		return stock(buf, desired, raw)
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := NewConversionMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := &ConversionHandler{Metrics: m}
	for _, n := range []int{1, 1000} {
		objs := make([]any, n)
		for i := range objs {
			objs[i] = conversiontest.RealisticWidget("ns", i)
		}
		objs[n/2] = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"boom","namespace":"ns"},"spec":{"image":"i"}}`
		code, text, review := post(t, h, reviewBody(t, "u", "widgetry.io/v1", objs...))
		if review == nil {
			t.Fatalf("%d objects: HTTP %d %s; want a failed ConversionReview", n, code, text)
		}
		msg := review.Response.Result.Message
		want := fmt.Sprintf("object %d (ns/boom", n/2+1)
		if review.Response.Result.Status != "Failure" || len(review.Response.ConvertedObjects) != 0 ||
			!strings.Contains(msg, want) || !strings.Contains(msg, "internal error") || !strings.Contains(msg, "injected") {
			t.Errorf("%d objects: got %s with %d objects: %q; want a Failure naming %s and the panic", n, review.Response.Result.Status, len(review.Response.ConvertedObjects), msg, want)
		}
	}
	_, _, review := post(t, h, reviewBody(t, "u", "widgetry.io/v1", conversiontest.RealisticWidget("ns", 1)))
	if review == nil || review.Response.Result.Status != "Success" {
		t.Fatalf("the handler did not answer a good review after the panics: %+v", review)
	}
	if got := testutil.ToFloat64(m.panics); got != 2 {
		t.Errorf("widget_conversion_panics_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues(reasonPanic)); got != 2 {
		t.Errorf("widget_conversion_failures_total{reason=%q} = %v, want 2", reasonPanic, got)
	}
}

// TestDataAnnotationSplice: the conversion-data annotation is read and removed (to v1) or
// written (to v1alpha1) without re-encoding the other annotations, also when a client wrote
// its key with JSON escapes.
func TestDataAnnotationSplice(t *testing.T) {
	for _, tc := range []struct{ name, annotations string }{
		{"plain key", `{"a":"<b>","widgetry.io/conversion-data":"{\"paused\":true}","z":"1"}`},
		{"escaped key", `{"a":"<b>","widgetry.io\/conversion-data":"{\"paused\":true}","z":"1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spoke := `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","namespace":"ns","annotations":` + tc.annotations + `},"spec":{"image":"i"}}`
			_, _, review := post(t, &ConversionHandler{}, reviewBody(t, "u", hubAPIVersion, spoke))
			if review == nil || review.Response.Result.Status != "Success" {
				t.Fatalf("to v1: %+v", review)
			}
			hub := decodeObject[v1.Widget](t, review.Response.ConvertedObjects[0].Raw)
			if !ptr.Deref(hub.Spec.Paused, false) || len(hub.Annotations) != 2 || hub.Annotations["a"] != "<b>" || hub.Annotations["z"] != "1" {
				t.Fatalf("to v1: paused %v, annotations %v; want paused and the two others kept", hub.Spec.Paused, hub.Annotations)
			}
			back, err := json.Marshal(hub)
			if err != nil {
				t.Fatal(err)
			}
			_, _, review = post(t, &ConversionHandler{}, reviewBody(t, "u", spokeAPIVersion, string(back)))
			if review == nil || review.Response.Result.Status != "Success" {
				t.Fatalf("back to v1alpha1: %+v", review)
			}
			w := decodeObject[v1alpha1.Widget](t, review.Response.ConvertedObjects[0].Raw)
			if w.Annotations["widgetry.io/conversion-data"] != `{"paused":true}` || w.Annotations["a"] != "<b>" || len(w.Annotations) != 3 {
				t.Fatalf("back to v1alpha1: annotations %v", w.Annotations)
			}
		})
	}
}

// TestConvertInPlaceMatchesOneByOne: a review's objects are written over its body while they
// fit (objects that shrink) and spill once one does not (an object without spec grows by
// "spec":{}). Whatever the mix, in one batch or split over workers, every converted object
// is the one converting it alone gives; and a failure after objects were written in place
// still names the right object.
func TestConvertInPlaceMatchesOneByOne(t *testing.T) {
	const bare = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"bare-%d","namespace":"ns"}}`
	var objs []any
	for i := range 600 { // over batchObjects: several batches, on workers
		if i%50 == 7 {
			objs = append(objs, fmt.Sprintf(bare, i))
		} else {
			objs = append(objs, conversiontest.RealisticWidget("ns", i))
		}
	}
	h := &ConversionHandler{}
	_, _, all := post(t, h, reviewBody(t, "all", "widgetry.io/v1", objs...))
	if all == nil || all.Response.Result.Status != "Success" || len(all.Response.ConvertedObjects) != len(objs) {
		t.Fatalf("review of %d objects: %+v", len(objs), all)
	}
	for i, o := range objs {
		_, _, one := post(t, h, reviewBody(t, "one", "widgetry.io/v1", o))
		if got, want := all.Response.ConvertedObjects[i].Raw, one.Response.ConvertedObjects[0].Raw; !bytes.Equal(got, want) {
			t.Fatalf("object %d converted in the review:\n%s\nalone:\n%s", i, got, want)
		}
	}

	// A failure at the end of the first batch, after the objects before it went in place.
	bad := slices.Clone(objs[:batchObjects])
	bad[batchObjects-1] = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"broken","namespace":"ns"},"spec":{"replicas":"two"}}`
	_, _, failed := post(t, h, reviewBody(t, "bad", "widgetry.io/v1", bad...))
	if failed == nil || failed.Response.Result.Status != "Failure" ||
		!strings.Contains(failed.Response.Result.Message, fmt.Sprintf("object %d (ns/broken, widgetry.io/v1alpha1)", batchObjects)) {
		t.Fatalf("a malformed object after %d converted ones: %+v", batchObjects-1, failed)
	}
}

// TestUndecodableDataDegradesOneObjectOnly: in a review large enough for several workers,
// objects whose conversion-data annotation does not parse are converted without it and
// marked, the annotation kept as it came, and counted; every other object converts as it
// would alone, and the review succeeds.
func TestUndecodableDataDegradesOneObjectOnly(t *testing.T) {
	objs := make([]any, 1000)
	for i := range objs {
		objs[i] = conversiontest.RealisticWidget("ns", i)
	}
	broken := func(name, value string) string {
		v, _ := json.Marshal(value)
		return `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"` + name + `","namespace":"ns","annotations":{"a":"b","` +
			conversion.DataAnnotation + `":` + string(v) + `}},"spec":{"image":"i","timeoutSeconds":3}}`
	}
	objs[10] = broken("broken-a", `{"paused":tru`)
	objs[900] = broken("broken-b", `not json`)
	reg := prometheus.NewRegistry()
	m, err := NewConversionMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	_, _, review := post(t, &ConversionHandler{Metrics: m}, reviewBody(t, "u", "widgetry.io/v1", objs...))
	if review.Response.Result.Status != "Success" || len(review.Response.ConvertedObjects) != len(objs) {
		t.Fatalf("got %s with %d objects (%q); want Success with %d", review.Response.Result.Status, len(review.Response.ConvertedObjects), review.Response.Result.Message, len(objs))
	}
	for i, raw := range review.Response.ConvertedObjects {
		got := decodeObject[v1.Widget](t, raw.Raw)
		mark, marked := got.Annotations[conversion.DegradedAnnotation]
		switch i {
		case 10, 900:
			want := map[int]string{10: `{"paused":tru`, 900: `not json`}[i]
			if !marked || !strings.HasPrefix(mark, reasonInvalidData+": ") || got.Annotations[conversion.DataAnnotation] != want || got.Annotations["a"] != "b" ||
				got.Spec.Image != "i" || got.Spec.Timeout == nil || *got.Spec.Timeout != "3s" || got.Spec.Paused != nil {
				t.Errorf("object %d: annotations %v spec %+v; want marked, the annotation kept, the spec converted without it", i, got.Annotations, got.Spec)
			}
		default:
			_, _, alone := post(t, &ConversionHandler{}, reviewBody(t, "u", "widgetry.io/v1", objs[i]))
			if marked || !bytes.Equal(raw.Raw, alone.Response.ConvertedObjects[0].Raw) {
				t.Fatalf("object %d differs from its conversion alone (marked %v):\n%s\n%s", i, marked, raw.Raw, alone.Response.ConvertedObjects[0].Raw)
			}
		}
	}
	if got := testutil.ToFloat64(m.degraded.WithLabelValues(reasonInvalidData)); got != 2 {
		t.Fatalf("widget_conversion_degraded_total{reason=%s} = %v, want 2", reasonInvalidData, got)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues(reasonInvalidData)); got != 0 {
		t.Fatalf("widget_conversion_failures_total{reason=%s} = %v, want 0: nothing failed", reasonInvalidData, got)
	}
}

// TestReviewSizeMetrics: each review that parses records its objects and its body's bytes,
// a failed one too; one that does not parse records neither.
func TestReviewSizeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewConversionMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := &ConversionHandler{Metrics: m}
	objs := make([]any, 300)
	for i := range objs {
		objs[i] = conversiontest.RealisticWidget("ns", i)
	}
	list := reviewBody(t, "u", "widgetry.io/v1", objs...)
	single := reviewBody(t, "u", "widgetry.io/v1", objs[0])
	refused := reviewBody(t, "u", "widgetry.io/v3", objs[0], objs[1])
	for _, body := range [][]byte{list, single, refused, []byte(`{"not":`)} {
		post(t, h, body)
	}
	count, sum := histogramOf(t, reg, "widget_conversion_review_objects")
	if count != 3 || sum != 301 {
		t.Errorf("widget_conversion_review_objects: %d reviews, %v objects; want 3 and 301 (300, 1, and none of the refused review: its unsupported desired version stops the reading)", count, sum)
	}
	count, sum = histogramOf(t, reg, "widget_conversion_review_bytes")
	if want := len(list) + len(single) + len(refused); count != 3 || int(sum) != want {
		t.Errorf("widget_conversion_review_bytes: %d reviews, %v bytes; want 3 and %d", count, sum, want)
	}
}

// histogramOf is the sample count and sum of the unlabelled histogram name in reg.
func histogramOf(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0, 0
}

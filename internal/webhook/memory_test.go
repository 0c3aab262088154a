package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"

	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/testenv/memprobe"
)

// chartMemoryLimit is the chart's default resources.limits.memory; the manager runs with
// GOMEMLIMIT at 90% of it.
const chartMemoryLimit = 256 << 20

// countingWriter is a ResponseWriter that keeps the status, the first bytes of the body and
// its length: the response itself must not be what the test measures.
type countingWriter struct {
	header http.Header
	code   int
	head   []byte
	n      int
}

func newCountingWriter() *countingWriter { return &countingWriter{header: http.Header{}} }

func (w *countingWriter) Header() http.Header { return w.header }
func (w *countingWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *countingWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if room := 4096 - len(w.head); room > 0 {
		w.head = append(w.head, p[:min(room, len(p))]...)
	}
	w.n += len(p)
	return len(p), nil
}

// serveMeasured sends body to h once and returns the answer and the peak heap it took.
func serveMeasured(h http.Handler, path string, body []byte) (*countingWriter, memprobe.Peak) {
	w := newCountingWriter()
	peak := memprobe.PeakHeap(func() {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, req)
	})
	return w, peak
}

// withMemoryLimit runs the test under the Go memory limit the manager has in the chart's pod.
func withMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(chartMemoryLimit / 10 * 9)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
}

// reviewOf wraps raw object JSON (already an array's elements) in a ConversionReview.
func reviewOf(desired, elements string) []byte {
	return []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"hostile","desiredAPIVersion":"` +
		desired + `","objects":[` + elements + `]}}`)
}

// repeatTo repeats unit, separated by sep, until about size bytes.
func repeatTo(unit, sep string, size int) string {
	n := max(1, size/(len(unit)+len(sep)))
	return strings.TrimSuffix(strings.Repeat(unit+sep, n), sep)
}

// TestHostileReviewsStayBounded: each shape that drove the old handler's heap to tens of
// times its body gets a clear 4xx, a Failure, or its conversion, within ConversionPeakFactor
// times its body (garbage not yet collected included), under the memory limit the manager
// has in the pod.
func TestHostileReviewsStayBounded(t *testing.T) {
	withMemoryLimit(t)
	const size = 8 << 20
	widget := func(name, extra string) string {
		return `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"` + name + `","namespace":"ns"` + extra + `},"spec":{"image":"i"}}`
	}
	for _, tc := range []struct {
		name string
		body []byte
		// want is the answer: an HTTP status other than 200, or "Success"/"Failure".
		want     string
		wantText string
	}{
		{"an array of four million numbers", reviewOf(hubAPIVersion, repeatTo("0", ",", size)), "Failure", "object 1: not a JSON object, it is a number"},
		{"an array of empty objects", reviewOf(hubAPIVersion, repeatTo("{}", ",", size)), "Failure", `object 1 (/, ): apiVersion "" kind ""`},
		{"deep nesting", reviewOf(hubAPIVersion, strings.Repeat("[", size)), "400", "exceeded max depth"},
		{"deep nesting inside a Widget", reviewOf(hubAPIVersion, `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":`+strings.Repeat(`{"a":`, size/5)), "400", "exceeded max depth"},
		{"one huge string", reviewOf(hubAPIVersion, widget("a", `,"annotations":{"a":"`+strings.Repeat("x", size)+`"}`)), "Success", ""},
		{"one huge key", reviewOf(hubAPIVersion, widget("a", `,"annotations":{"`+strings.Repeat("k", size)+`":"v"}`)), "Success", ""},
		{"duplicate keys", reviewOf(hubAPIVersion, `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget",`+repeatTo(`"metadata":{"name":"a"}`, ",", size)+`,"spec":{"image":"i"}}`), "Success", ""},
		{"duplicate keys in spec", reviewOf(hubAPIVersion, `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{`+repeatTo(`"image":"i"`, ",", size)+`}}`), "Success", ""},
		{"non-object elements after a Widget", reviewOf(hubAPIVersion, widget("a", "")+`,"s",null,`+repeatTo("[]", ",", size)), "Failure", "object 2: not a JSON object, it is a string"},
		{"truncated JSON", reviewOf(hubAPIVersion, repeatTo(widget("a", ""), ",", size))[:size/2], "400", "unexpected end of JSON input"},
		{"a quarter million minimal Widgets", reviewOf(hubAPIVersion, repeatTo(`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"}}`, ",", size)), "Success", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, peak := serveMeasured(&ConversionHandler{}, ConvertPath, tc.body)
			got := fmt.Sprint(w.code)
			if w.code == http.StatusOK {
				var head struct {
					Response struct {
						Result struct{ Status, Message string }
					}
				}
				// The head is the start of the response: decode the result from a closed prefix.
				if i := bytes.Index(w.head, []byte(`"convertedObjects"`)); i > 0 {
					_ = json.Unmarshal(append(append([]byte{}, w.head[:i-1]...), "}}"...), &head)
				}
				got = head.Response.Result.Status
				if !strings.Contains(head.Response.Result.Message, tc.wantText) {
					t.Errorf("message %q does not say %q", head.Response.Result.Message, tc.wantText)
				}
			} else if !strings.Contains(string(w.head), tc.wantText) {
				t.Errorf("answer %q does not say %q", w.head, tc.wantText)
			}
			if got != tc.want {
				t.Errorf("answered %s, want %s: %.300s", got, tc.want, w.head)
			}
			ratio := float64(peak.Bytes) / float64(len(tc.body))
			t.Logf("%d-byte body: peak heap %d bytes (%.2f× the body, %d samples), answered %s with %d bytes", len(tc.body), peak.Bytes, ratio, peak.Samples, got, w.n)
			if ratio > ConversionPeakFactor {
				t.Errorf("peak heap %.2f× the body, over the %g× the in-flight budget charges", ratio, ConversionPeakFactor)
			}
		})
	}
}

// TestLargestRealisticReviewFits: a realistic review at the default body limit converts, in
// the memory the chart gives the pod, within the peak factor the in-flight budget charges.
func TestLargestRealisticReviewFits(t *testing.T) {
	withMemoryLimit(t)
	limits, err := LimitsFor(chartMemoryLimit/10*9, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for size, i := 0, 0; ; i++ {
		w := conversiontest.RealisticWidget("ns", i)
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if size+len(b)+1 > int(limits.MaxConversionBody)-256 {
			break
		}
		size += len(b) + 1
		objs = append(objs, json.RawMessage(b))
	}
	body := reviewBody(t, "big", v1.GroupVersion.String(), objs...)
	w, peak := serveMeasured(&ConversionHandler{MaxBodyBytes: limits.MaxConversionBody}, ConvertPath, body)
	ratio := float64(peak.Bytes) / float64(len(body))
	t.Logf("%d Widgets in a %d-byte review (limit %d): HTTP %d, %d bytes answered, peak heap %d bytes (%.2f× the body)",
		len(objs), len(body), limits.MaxConversionBody, w.code, w.n, peak.Bytes, ratio)
	if w.code != http.StatusOK || !bytes.Contains(w.head, []byte(`"status":"Success"`)) {
		t.Fatalf("HTTP %d %.300s", w.code, w.head)
	}
	if ratio > ConversionPeakFactor {
		t.Errorf("peak heap %.2f× the body, over the %g× the budget charges", ratio, ConversionPeakFactor)
	}
}

// TestLargeAdmissionReviewsStayBounded: AdmissionReviews at the body limit — a Widget
// with a huge annotation, updated, and the same Widget losing its finalizer while it is
// deleted (the path that used to decode both objects into maps) — are answered within
// AdmissionPeakFactor times their body.
func TestLargeAdmissionReviewsStayBounded(t *testing.T) {
	withMemoryLimit(t)
	big := strings.Repeat("x", DefaultMaxAdmissionBodyBytes/2-4096)
	object := func(finalizers string, deleting bool) string {
		ts := ""
		if deleting {
			ts = `,"deletionTimestamp":"2026-12-01T00:00:00Z"`
		}
		return `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a","namespace":"ns","finalizers":[` + finalizers + `],"annotations":{"a":"` + big + `"}` + ts + `},"spec":{"image":"registry.example.com/a:v1"}}`
	}
	review := func(obj, old string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"widgetry.io","version":"v1","kind":"Widget"},` +
			`"resource":{"group":"widgetry.io","version":"v1","resource":"widgets"},"operation":"UPDATE","userInfo":{"username":"u"},"object":` + obj + `,"oldObject":` + old + `}}`)
	}
	h := LimitBody(DefaultMaxAdmissionBodyBytes, "--admission-max-body-bytes", &crwebhook.Admission{Handler: Validator{}})
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"an update of a Widget with a huge annotation", review(object(`"f"`, false), object(`"f"`, false))},
		{"a finalizer removed while deleting", review(object(``, true), object(`"f"`, true))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, peak := serveMeasured(h, ValidatePath, tc.body)
			ratio := float64(peak.Bytes) / float64(len(tc.body))
			t.Logf("%d-byte body: HTTP %d %.120s; peak heap %d bytes (%.2f× the body)", len(tc.body), w.code, w.head, peak.Bytes, ratio)
			if w.code != http.StatusOK || !bytes.Contains(w.head, []byte(`"allowed":true`)) {
				t.Fatalf("not admitted: %d %.300s", w.code, w.head)
			}
			if ratio > AdmissionPeakFactor {
				t.Errorf("peak heap %.2f× the body, over the %g× the in-flight budget charges", ratio, AdmissionPeakFactor)
			}
		})
	}
}

// Under the race detector the heap is the detector's as much as the handler's, so these
// tests are not built with -race: make test-unit runs them in a second go test without it,
// where they must pass.

//go:build !race

package webhook

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"

	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/webhook/webhooktest"
)

// chartMemoryLimit is the chart's default resources.limits.memory; the manager runs with
// GOMEMLIMIT at 90% of it.
const chartMemoryLimit = 256 << 20

// withMemoryLimit runs the test under the Go memory limit the manager has in the chart's pod.
func withMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(chartMemoryLimit / 10 * 9)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
}

// TestMemoryHostileReviews: each shape that drove the old handler's heap to tens of
// times its body gets a clear 4xx, a Failure, or its conversion, within ConversionPeakFactor
// times its body (garbage not yet collected included), under the memory limit the manager
// has in the pod.
func TestMemoryHostileReviews(t *testing.T) {
	withMemoryLimit(t)
	for _, tc := range webhooktest.Hostile(8 << 20) {
		t.Run(tc.Name, func(t *testing.T) {
			w, peak := serveMeasured(&ConversionHandler{}, ConvertPath, tc.Body)
			got := fmt.Sprint(w.code)
			if w.code == http.StatusOK {
				var message string
				got, message = webhooktest.Result(w.head)
				if !strings.Contains(message, tc.WantText) {
					t.Errorf("message %q does not say %q", message, tc.WantText)
				}
			} else if !strings.Contains(string(w.head), tc.WantText) {
				t.Errorf("answer %q does not say %q", w.head, tc.WantText)
			}
			if got != tc.Want {
				t.Errorf("answered %s, want %s: %.300s", got, tc.Want, w.head)
			}
			ratio := float64(peak.Bytes) / float64(len(tc.Body))
			t.Logf("%d-byte body: peak heap %d bytes (%.2f× the body, %d samples), answered %s with %d bytes", len(tc.Body), peak.Bytes, ratio, peak.Samples, got, w.n)
			if ratio > ConversionPeakFactor {
				t.Errorf("peak heap %.2f× the body, over the %g× the in-flight budget charges", ratio, ConversionPeakFactor)
			}
		})
	}
}

// TestMemoryLargestRealisticReview: a realistic review at the default body limit converts, in
// the memory the chart gives the pod, within the peak factor the in-flight budget charges.
func TestMemoryLargestRealisticReview(t *testing.T) {
	withMemoryLimit(t)
	limits, err := LimitsFor(chartMemoryLimit/10*9, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	body, n := webhooktest.Realistic("big", v1.GroupVersion.String(), int(limits.MaxConversionBody))
	w, peak := serveMeasured(&ConversionHandler{MaxBodyBytes: limits.MaxConversionBody}, ConvertPath, body)
	ratio := float64(peak.Bytes) / float64(len(body))
	t.Logf("%d Widgets in a %d-byte review (limit %d): HTTP %d, %d bytes answered, peak heap %d bytes (%.2f× the body)",
		n, len(body), limits.MaxConversionBody, w.code, w.n, peak.Bytes, ratio)
	if w.code != http.StatusOK || !bytes.Contains(w.head, []byte(`"status":"Success"`)) {
		t.Fatalf("HTTP %d %.300s", w.code, w.head)
	}
	if ratio > ConversionPeakFactor {
		t.Errorf("peak heap %.2f× the body, over the %g× the budget charges", ratio, ConversionPeakFactor)
	}
}

// TestMemoryLargeAdmissionReviews: AdmissionReviews at the body limit — a Widget
// with a huge annotation, updated, and the same Widget losing its finalizer while it is
// deleted (the path that used to decode both objects into maps) — are answered within
// AdmissionPeakFactor times their body.
func TestMemoryLargeAdmissionReviews(t *testing.T) {
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

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
	"time"

	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/testenv/memprobe"
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

// The peak heap is sampled (memprobe.PeakHeap), so it is only as good as the readings it
// rests on: a sampler that never ran while the handler did reports the heap before or after
// the review, far below its peak, and the bounds below would hold whatever the handler did.
// Only the readings after a run's first are sure to be taken while the handler ran (the
// first is taken whenever the sampler's goroutine first gets a CPU, which may be after the
// handler returned), and each measured review must rest on enough of them:
//   - at least minHeapSamples, whatever its length: a review too short for that (a hostile one
//     refused at once takes 2 ms) is served again, and its peak is the highest of the runs;
//   - at least one per starvedSampleInterval of each run's length. The sampler reads every
//     memprobe.SampleInterval (100 µs), but on a loaded 2-core machine it was measured at
//     about one reading per ms, and when the handler keeps every core busy it only runs when
//     the scheduler preempts the handler, about every 10 ms: fewer readings than that within
//     a run mean it was starved beyond what the measurement can afford. The bound is owed per
//     run, not over the runs' total: a 1 ms run owes none, and its first reading is not
//     counted, so hundreds of short runs summed would owe readings no run could give (CI once
//     failed a 0.8 ms review that way, 20 readings over 303 runs "owing" 24).
const (
	minHeapSamples        = 20
	starvedSampleInterval = 10 * time.Millisecond
	// measureTime bounds the time a review is served again for (a sampler that never runs
	// would otherwise have it served forever).
	measureTime = 2 * time.Second
)

// measureReview serves body to h, again until the heap was sampled as often as the bounds
// above want while h ran, and returns the first answer and the highest peak, with the
// readings taken while h ran (Samples) and the time of every run (Elapsed). It fails the
// test, saying how many readings it took, when the sampler did not keep up.
func measureReview(t *testing.T, h http.Handler, path string, body []byte) (*countingWriter, memprobe.Peak) {
	t.Helper()
	w, peak := serveMeasured(h, path, body)
	peak.Samples--
	owed := int(peak.Elapsed / starvedSampleInterval)
	runs := 1
	for ; peak.Samples < max(minHeapSamples, owed) && peak.Elapsed < measureTime; runs++ {
		_, again := serveMeasured(h, path, body)
		peak.Bytes, peak.Samples, peak.Elapsed = max(peak.Bytes, again.Bytes), peak.Samples+again.Samples-1, peak.Elapsed+again.Elapsed
		owed += int(again.Elapsed / starvedSampleInterval)
	}
	if want := max(minHeapSamples, owed); peak.Samples < want {
		t.Fatalf("the heap was sampled %d times while the handler ran, in %s over %d runs; want at least %d (one per %s of each run, %d at least): the sampler was starved, so its peak (%d bytes) may be far too low",
			peak.Samples, peak.Elapsed, runs, want, starvedSampleInterval, minHeapSamples, peak.Bytes)
	}
	if runs > 1 {
		t.Logf("served %d times for %d heap samples", runs, peak.Samples)
	}
	return w, peak
}

// TestMemoryHostileReviews: each shape that drove the old handler's heap to tens of
// times its body gets a clear 4xx, a Failure, or its conversion, within ConversionPeakFactor
// times its body (garbage not yet collected included), under the memory limit the manager
// has in the pod.
func TestMemoryHostileReviews(t *testing.T) {
	withMemoryLimit(t)
	for _, tc := range webhooktest.Hostile(8 << 20) {
		t.Run(tc.Name, func(t *testing.T) {
			w, peak := measureReview(t, &ConversionHandler{}, ConvertPath, tc.Body)
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
			t.Logf("%d-byte body: peak heap %d bytes (%.2f× the body, %d samples in %s), answered %s with %d bytes", len(tc.Body), peak.Bytes, ratio, peak.Samples, peak.Elapsed, got, w.n)
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
	w, peak := measureReview(t, &ConversionHandler{MaxBodyBytes: limits.MaxConversionBody}, ConvertPath, body)
	ratio := float64(peak.Bytes) / float64(len(body))
	t.Logf("%d Widgets in a %d-byte review (limit %d): HTTP %d, %d bytes answered, peak heap %d bytes (%.2f× the body, %d samples in %s)",
		n, len(body), limits.MaxConversionBody, w.code, w.n, peak.Bytes, ratio, peak.Samples, peak.Elapsed)
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
			w, peak := measureReview(t, h, ValidatePath, tc.body)
			ratio := float64(peak.Bytes) / float64(len(tc.body))
			t.Logf("%d-byte body: HTTP %d %.120s; peak heap %d bytes (%.2f× the body, %d samples in %s)", len(tc.body), w.code, w.head, peak.Bytes, ratio, peak.Samples, peak.Elapsed)
			if w.code != http.StatusOK || !bytes.Contains(w.head, []byte(`"allowed":true`)) {
				t.Fatalf("not admitted: %d %.300s", w.code, w.head)
			}
			if ratio > AdmissionPeakFactor {
				t.Errorf("peak heap %.2f× the body, over the %g× the in-flight budget charges", ratio, AdmissionPeakFactor)
			}
		})
	}
}

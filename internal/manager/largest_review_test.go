//go:build envtest

package manager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/memprobe"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// largestWidgetBytes is about as large as a Widget can be: etcd refuses a request over
// 1.5 MiB (its --max-request-bytes default), and the object is stored with its managedFields.
const largestWidgetBytes = 1300 << 10

// TestLargestReviewTheAPIServerSends (issue #37): the apiserver converts Widgets one at a
// time, as it decodes them (BenchmarkListThroughConversion measures it for every LIST shape),
// so the largest ConversionReview it can send holds one Widget as large as it stores. Such a
// Widget - 1.3 MiB of labels, the 64 endpoints the schema allows, and the v1-only fields that
// v1alpha1 carries in its conversion-data annotation - written through v1 and read through
// v1alpha1 (a GET, a LIST, a LIST from the watch cache) converts at the manager with the
// chart's memory limit; the manager's own metric shows that review, and its memory stays
// within the limit.
func TestLargestReviewTheAPIServerSends(t *testing.T) {
	const limit = 256 << 20 // the chart's resources.limits.memory
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageFlipStorage)
	m := op.StartManager(t, widgetenv.ManagerOptions{Args: []string{"--components=webhooks"}, Env: []string{"GOMEMLIMIT=" + strconv.Itoa(limit)}})
	token := widgetenv.ServiceAccountToken(t, env, "prometheus", true)
	ctx := context.Background()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "large"}}); err != nil {
		t.Fatal(err)
	}

	w := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "large", Name: "largest", Labels: map[string]string{}},
		Spec: v1.WidgetSpec{Image: "registry.example.com/team/server:v1", Size: ptr.To[int32](3), Timeout: ptr.To("1.5s"),
			Paused: ptr.To(true), Endpoints: map[string]v1.EndpointSpec{}}}
	for i := range 64 {
		w.Spec.Endpoints[fmt.Sprintf("endpoint-%02d", i)] = v1.EndpointSpec{Port: int32(8000 + i)}
	}
	value := strings.Repeat("v", 63)
	for i := 0; objectBytes(t, w) < largestWidgetBytes; i++ {
		w.Labels[fmt.Sprintf("widgetry.example.com/label-%06d", i)] = value
	}
	if err := c.Create(ctx, w); err != nil {
		t.Fatalf("create a Widget of %d bytes: %v", objectBytes(t, w), err)
	}
	before := largeReviews(t, m, token)

	alpha := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("widgetry.io/v1alpha1")
		u.SetKind("Widget")
		return u
	}
	got := alpha()
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "large", Name: "largest"}, got); err != nil {
		t.Fatalf("GET through v1alpha1: %v", err)
	}
	if len(got.GetLabels()) != len(w.Labels) || got.GetAnnotations()["widgetry.io/conversion-data"] == "" {
		t.Errorf("through v1alpha1: %d labels (want %d), annotations %v", len(got.GetLabels()), len(w.Labels), got.GetAnnotations())
	}
	for _, opts := range [][]client.ListOption{{client.InNamespace("large")}, {client.InNamespace("large"), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}}} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("widgetry.io/v1alpha1")
		list.SetKind("WidgetList")
		if err := env.Client.List(ctx, list, opts...); err != nil || len(list.Items) != 1 {
			t.Fatalf("LIST through v1alpha1: %d items, %v", len(list.Items), err)
		}
	}

	if after := largeReviews(t, m, token); after <= before {
		t.Errorf("widget_conversion_review_bytes counts no review over 1 MiB since the create (%d before, %d after): the GET through v1alpha1 should have sent the whole Widget", before, after)
	}
	rss, err := memprobe.RSS(m.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if rss >= limit {
		t.Errorf("the manager's resident memory is %d MiB, at or over the chart's limit of %d MiB", rss>>20, limit>>20)
	}
	t.Logf("a Widget of %d bytes with %d labels converted; the manager's RSS %d MiB", objectBytes(t, w), len(w.Labels), rss>>20)
}

// objectBytes is the size of w as JSON.
func objectBytes(t *testing.T, w *v1.Widget) int {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// largeReviews is how many ConversionReviews over 1 MiB the manager has received
// (widget_conversion_review_bytes: all reviews less those in the buckets up to 1 MiB).
func largeReviews(t *testing.T, m *widgetenv.Manager, token string) uint64 {
	t.Helper()
	f, ok := m.MetricFamilies(t, token)["widget_conversion_review_bytes"]
	if !ok || len(f.GetMetric()) != 1 {
		t.Fatalf("widget_conversion_review_bytes: not served (%v)", ok)
	}
	h := f.GetMetric()[0].GetHistogram()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 1<<20 {
			return h.GetSampleCount() - b.GetCumulativeCount()
		}
	}
	t.Fatal("widget_conversion_review_bytes has no 1 MiB bucket")
	return 0
}

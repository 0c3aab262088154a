//go:build envtest

package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// TestOneBadObjectDoesNotFailAList: a Widget stored as v1alpha1 with a conversion-data
// annotation that does not parse (written past admission: no webhook runs on a create) is
// read through v1 marked, not refused, so every LIST and watch through v1 succeeds, the
// degraded counter counts it, the runbook's repair (removing the annotation through v1alpha1)
// clears the mark, and the namespace controller deletes the namespace that holds it. Shown
// failing (the LIST refused, the namespace stuck) with the degraded path turned back into the
// review's failure.
func TestOneBadObjectDoesNotFailAList(t *testing.T) {
	const ns, objects = "degraded", 20
	reg := prometheus.NewRegistry()
	metrics, err := webhook.NewConversionMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	url, ca := testcerts.Serve(t, &webhook.ConversionHandler{Metrics: metrics})
	c := crd.WithWebhookConversion(crd.Widget(), apiextensionsv1.WebhookClientConfig{URL: ptr.To(url + webhook.ConvertPath), CABundle: ca.PEM})
	if err := crd.SetStorageVersion(c, "v1alpha1"); err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.Options{CRDs: []*apiextensionsv1.CustomResourceDefinition{c}, Scheme: scheme.New(), ControllerManager: true})
	ctx := t.Context()
	createNamespace(t, env, ns)
	for i := range objects {
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w-%02d", i)},
			Spec: v1alpha1.WidgetSpec{Image: "srv:1", TimeoutSeconds: ptr.To[int32](5), Endpoints: []v1alpha1.Endpoint{{Name: "web", Port: 80}}}}
		if i == 7 {
			w.Annotations = map[string]string{conversion.DataAnnotation: `{"paused":tru`}
		}
		if err := env.Client.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	var list v1.WidgetList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("LIST through v1 with one undecodable conversion-data annotation: %v", err)
	}
	marked := 0
	for _, w := range list.Items {
		mark, ok := w.Annotations[conversion.DegradedAnnotation]
		if !ok {
			continue
		}
		marked++
		if w.Name != "w-07" || !strings.Contains(mark, "InvalidConversionData") || w.Annotations[conversion.DataAnnotation] != `{"paused":tru` ||
			w.Spec.Image != "srv:1" || w.Spec.Timeout == nil || *w.Spec.Timeout != "5s" || w.Spec.Paused != nil {
			t.Errorf("degraded %s: annotations %v spec %+v; want w-07 marked, its annotation kept as it came, the spec converted without it", w.Name, w.Annotations, w.Spec)
		}
	}
	if len(list.Items) != objects || marked != 1 {
		t.Fatalf("LIST through v1: %d objects, %d marked; want %d and 1", len(list.Items), marked, objects)
	}
	if got := degradedCount(t, reg); got < 1 {
		t.Fatalf("widget_conversion_degraded_total{reason=InvalidConversionData} = %v, want at least 1", got)
	}

	// A watch through v1 from the start sends every object.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	watch, err := wc.Watch(watchCtx, &v1.WidgetList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
	if err != nil {
		t.Fatalf("WATCH through v1: %v", err)
	}
	seen := map[string]bool{}
	for ev := range watch.ResultChan() {
		w, ok := ev.Object.(*v1.Widget)
		if !ok {
			t.Fatalf("watch through v1: event %s %T %v", ev.Type, ev.Object, ev.Object)
		}
		if seen[w.Name] = true; len(seen) == objects {
			break
		}
	}
	watch.Stop()
	if len(seen) != objects {
		t.Fatalf("watch through v1 sent %d of %d objects", len(seen), objects)
	}

	// The runbook's repair: remove the annotation through v1alpha1; the mark goes with it.
	repair := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, conversion.DataAnnotation)
	if err := env.Client.Patch(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-07"}}, client.RawPatch(types.MergePatchType, []byte(repair))); err != nil {
		t.Fatalf("the repair: %v", err)
	}
	repaired := &v1.Widget{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-07"}, repaired); err != nil {
		t.Fatal(err)
	}
	if _, ok := repaired.Annotations[conversion.DegradedAnnotation]; ok {
		t.Fatalf("after the repair w-07 is still marked: %v", repaired.Annotations)
	}

	// Planted again, the namespace controller (which lists every resource of the namespace
	// through its preferred version, v1) deletes the namespace with it.
	planted := fmt.Sprintf(`{"metadata":{"annotations":{%q:"not json"}}}`, conversion.DataAnnotation)
	if err := env.Client.Patch(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-03"}}, client.RawPatch(types.MergePatchType, []byte(planted))); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Kubectl(t, "delete", "namespace", ns, "--wait=false"); err != nil {
		t.Fatalf("delete namespace: %v %s", err, out)
	}
	testenv.Eventually(t, 90*time.Second, "the namespace deleted with the degraded Widget in it", func() error {
		var n metav1.PartialObjectMetadata
		n.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("Namespace"))
		n.APIVersion = "v1"
		err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, &n)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace %s still there: %w", ns, err)
	})
	t.Logf("LIST and watch through v1 read %d objects with one marked; %v degraded conversions counted; repaired; namespace deleted", objects, degradedCount(t, reg))
}

func degradedCount(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "widget_conversion_degraded_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "InvalidConversionData" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

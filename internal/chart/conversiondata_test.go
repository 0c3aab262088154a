//go:build envtest

package chart

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

const (
	conversionDataGuard = "widgets.widgetry.io-conversion-data-guard"
	// widgetenvNonCanonical is what the envtests write to send a v1alpha1 update to the
	// mutating webhook: the guard must admit it.
	widgetenvNonCanonical = widgetenv.NonCanonicalConversionData
)

// TestConversionDataGuard: with the chart's conversion-data guard, the apiserver itself (no
// webhook of ours installed) refuses a Widget written through v1alpha1 whose conversion-data
// annotation does not parse as conversion writes it, or whose timeout does not round up to
// spec.timeoutSeconds, naming the policy; it admits every value conversion writes (drawn from
// the round-trip filler's hubs, converted), an update that leaves a stored broken value as it
// was (ratcheting) and the repair. With the binding deleted (the negative control) every
// forgery is stored.
func TestConversionDataGuard(t *testing.T) {
	const ns = "guarded"
	env, _ := widgetenv.StartAtStage(t, crd.StageAddVersion, testenv.Options{})
	ctx := t.Context()
	c := env.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	widget := func(name, data string, seconds int32) *v1alpha1.Widget {
		return &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{conversion.DataAnnotation: data}},
			Spec: v1alpha1.WidgetSpec{Image: "srv:1", TimeoutSeconds: ptr.To(seconds), Endpoints: []v1alpha1.Endpoint{{Name: "web", Port: 80}, {Name: "admin", Port: 81}}}}
	}
	// Planted before the guard exists: stored objects with values it would refuse.
	must(t, c.Create(ctx, widget("stored-broken", `{"paused":tru`, 5)))

	rendered := render(t, nil)
	var binding client.Object
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		u := rendered.Get(kind, conversionDataGuard)
		if u == nil {
			t.Fatalf("the chart renders no %s %s", kind, conversionDataGuard)
		}
		must(t, c.Create(ctx, u))
		binding = u
	}
	refused := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+conversionDataGuard+"'")
	}
	n := 0
	testenv.Eventually(t, 30*time.Second, "the guard in force", func() error {
		n++
		err := c.Create(ctx, widget(fmt.Sprintf("probe-%d", n), "not json", 5))
		if !refused(err) {
			return fmt.Errorf("a forged annotation: %w, want a refusal naming %s", err, conversionDataGuard)
		}
		return nil
	})

	forged := []struct {
		name, data string
		seconds    int32
		why        string
	}{
		{"truncated", `{"paused":tru`, 5, "is not conversion data"},
		{"not-an-object", `["paused"]`, 5, "is not conversion data"},
		{"trailing-garbage", `{"paused":true}x`, 5, "is not conversion data"},
		{"wrong-type", `{"paused":"yes"}`, 5, "is not conversion data"},
		{"unknown-key", `{"paused":true,"size":3}`, 5, "is not conversion data"},
		{"not-a-duration", `{"timeout":"soon"}`, 5, "is not conversion data"},
		{"timeout-mismatch", `{"timeout":"1.5s"}`, 5, "does not round up to spec.timeoutSeconds 5"},
		{"timeout-too-long", `{"timeout": "90s", "paused": true}`, 60, "does not round up to spec.timeoutSeconds 60"},
	}
	for _, f := range forged {
		if err := c.Create(ctx, widget("forged-"+f.name, f.data, f.seconds)); !refused(err) || !strings.Contains(err.Error(), f.why) {
			t.Errorf("%s (%s): %v, want refused by %s: %q", f.name, f.data, err, conversionDataGuard, f.why)
		}
	}

	// Valid JSON a tool that re-encodes manifests may produce is admitted (the mutating webhook
	// keeps the v1 fields for those, where the policy route cannot read them).
	for i, data := range []string{widgetenvNonCanonical, `{"paused":true,"timeout":"1.5s"}`, `{ "timeout" : "1.5s" , "endpointOrder" : "web,admin" }`, `{"paused":false}`, `{}`} {
		if err := c.Create(ctx, widget(fmt.Sprintf("valid-%d", i), data, 2)); err != nil {
			t.Errorf("valid conversion data %s refused: %v", data, err)
		}
	}

	// Every value conversion writes is admitted: hubs from the round-trip filler, converted.
	fill := conversiontest.NewFiller(7)
	r := rand.New(rand.NewSource(7))
	admitted := 0
	for i := 0; admitted < 200 && i < 5000; i++ {
		hub := &v1.Widget{}
		fill.Fill(hub)
		hub.Spec.Timeout = ptr.To(conversiontest.RandomTimeout(r))
		spoke := &v1alpha1.Widget{}
		if err := conversion.ConvertWidgetFromHub(ctx, hub, spoke); err != nil {
			t.Fatal(err)
		}
		data, ok := spoke.Annotations[conversion.DataAnnotation]
		if !ok {
			continue
		}
		w := widget(fmt.Sprintf("converted-%d", i), data, *spoke.Spec.TimeoutSeconds)
		if err := c.Create(ctx, w); err != nil {
			t.Fatalf("conversion's own annotation %s (timeoutSeconds %d) refused: %v", data, *spoke.Spec.TimeoutSeconds, err)
		}
		admitted++
	}
	if admitted < 200 {
		t.Fatalf("only %d converted hubs carried conversion data", admitted)
	}

	// Ratcheting: a stored broken value stays writable, a new broken value is refused, and the
	// repair (removing it) goes through.
	label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))
	stored := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stored-broken"}}
	if err := c.Patch(ctx, stored, label); err != nil {
		t.Errorf("a label change of a stored Widget whose annotation the guard would refuse: %v", err)
	}
	if err := c.Patch(ctx, stored, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"still not json"}}}`, conversion.DataAnnotation))); !refused(err) {
		t.Errorf("changing a stored broken annotation to another broken one: %v, want refused", err)
	}
	if err := c.Patch(ctx, stored, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, conversion.DataAnnotation))); err != nil {
		t.Errorf("the repair: %v", err)
	}

	// The negative control: without the binding every forgery is stored.
	must(t, c.Delete(ctx, binding))
	testenv.Eventually(t, 30*time.Second, "the guard gone", func() error {
		n++
		return c.Create(ctx, widget(fmt.Sprintf("probe-%d", n), "not json", 5))
	})
	for _, f := range forged {
		if err := c.Create(ctx, widget("unguarded-"+f.name, f.data, f.seconds)); err != nil {
			t.Errorf("without the guard, %s: %v, want stored", f.name, err)
		}
	}
	t.Logf("%d forgeries refused naming the policy, %d of conversion's own values admitted, a stored broken value writable, the repair admitted; without the binding all stored", len(forged), admitted)
}

package conversion_test

import (
	"context"
	"testing"

	v1 "github.com/widgetry/widget-operator/api/v1"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
)

func TestRoundTripSpokeHubSpoke(t *testing.T) {
	f := conversiontest.NewFiller(1)
	ctx := context.Background()
	var seen variety
	defer seen.require(t)
	for i := range conversiontest.Iterations(t) {
		in := &v1alpha1.Widget{}
		f.Fill(in)
		_, hasData := in.Annotations[conversion.DataAnnotation]
		seen.note(hasData, in.Spec.Endpoints == nil, in.Spec.Endpoints != nil && len(in.Spec.Endpoints) == 0, in.Spec.Replicas != nil && *in.Spec.Replicas == 0)
		hub := &v1.Widget{}
		if err := conversion.ConvertWidgetToHub(ctx, in.DeepCopy(), hub); err != nil {
			t.Fatalf("iteration %d: to hub: %v\nobject: %+v", i, err, in)
		}
		out := &v1alpha1.Widget{}
		if err := conversion.ConvertWidgetFromHub(ctx, hub, out); err != nil {
			t.Fatalf("iteration %d: from hub: %v", i, err)
		}
		out.TypeMeta = in.TypeMeta
		if d := conversiontest.Diff(in, out); d != "" {
			t.Fatalf("iteration %d: spoke -> hub -> spoke changed the object %s", i, d)
		}
	}
}

func TestRoundTripHubSpokeHub(t *testing.T) {
	f := conversiontest.NewFiller(2)
	ctx := context.Background()
	var seen variety
	defer seen.require(t)
	for i := range conversiontest.Iterations(t) {
		in := &v1.Widget{}
		f.Fill(in)
		seen.note(in.Spec.Paused != nil, in.Spec.Endpoints == nil, in.Spec.Endpoints != nil && len(in.Spec.Endpoints) == 0, in.Spec.Size != nil && *in.Spec.Size == 0)
		spoke := &v1alpha1.Widget{}
		if err := conversion.ConvertWidgetFromHub(ctx, in.DeepCopy(), spoke); err != nil {
			t.Fatalf("iteration %d: from hub: %v\nobject: %+v", i, err, in)
		}
		out := &v1.Widget{}
		if err := conversion.ConvertWidgetToHub(ctx, spoke, out); err != nil {
			t.Fatalf("iteration %d: to hub: %v", i, err)
		}
		out.TypeMeta = in.TypeMeta
		if d := conversiontest.Diff(in, out); d != "" {
			t.Fatalf("iteration %d: hub -> spoke -> hub changed the object %s", i, d)
		}
	}
}

// TestDiffTellsNilFromEmpty holds the comparison helper every round trip relies on to the
// property apiequality.Semantic lacks.
func TestDiffTellsNilFromEmpty(t *testing.T) {
	a := &v1.Widget{Spec: v1.WidgetSpec{Endpoints: map[string]v1.EndpointSpec{}}}
	b := &v1.Widget{}
	if conversiontest.Diff(a, b) == "" {
		t.Fatal("Diff treats an empty endpoints map as equal to no map")
	}
	if d := conversiontest.Diff(a, a.DeepCopy()); d != "" {
		t.Fatalf("Diff reports a copy as different: %s", d)
	}
}

// variety makes sure the filler produced the hard cases, so a round trip cannot pass on
// trivial objects only.
type variety struct{ lossy, nilList, emptyList, zero, total int }

func (v *variety) note(lossy, nilList, emptyList, zero bool) {
	v.total++
	for _, c := range []struct {
		hit bool
		n   *int
	}{{lossy, &v.lossy}, {nilList, &v.nilList}, {emptyList, &v.emptyList}, {zero, &v.zero}} {
		if c.hit {
			*c.n++
		}
	}
}

func (v *variety) require(t *testing.T) {
	t.Helper()
	if t.Failed() || v.total < 100 {
		return
	}
	if v.lossy == 0 || v.nilList == 0 || v.emptyList == 0 || v.zero == 0 {
		t.Errorf("filler produced too little variety in %d objects: %d with data only the hub holds, %d without endpoints, %d with empty endpoints, %d with an explicit zero size", v.total, v.lossy, v.nilList, v.emptyList, v.zero)
	}
	t.Logf("%d objects: %d with data only the hub holds, %d without endpoints, %d with empty endpoints, %d with an explicit zero size", v.total, v.lossy, v.nilList, v.emptyList, v.zero)
}

//go:build envtest

package metalist_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/metalist"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestEachObjectAtReadsOneSnapshot: on a real apiserver, with two versions served (the
// second read through the conversion webhook), a LIST through v1alpha1 at the resourceVersion
// a LIST through v1 returned sees exactly the objects that LIST saw — on every page — while
// objects created in between show only in a LIST of now. Upgrade checks compare versions
// this way while clients keep writing.
func TestEachObjectAtReadsOneSnapshot(t *testing.T) {
	env, _ := widgetenv.StartAtStage(t, crd.StageAddVersion, testenv.Options{})
	ctx := context.Background()
	create := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("w-%04d", i)},
				Spec: v1alpha1.WidgetSpec{Image: "registry.example.com/w:1", Replicas: ptr.To[int32](1), TimeoutSeconds: ptr.To[int32](30)}}
			if err := env.Client.Create(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(version, at string) (int, string) {
		t.Helper()
		n := 0
		rv, err := metalist.EachObjectAt(ctx, env.Client, "widgetry.io/"+version, "WidgetList", at, func(*unstructured.Unstructured) error {
			n++
			return nil
		})
		if err != nil {
			t.Fatalf("list through %s at %q: %v", version, at, err)
		}
		return n, rv
	}
	const before = metalist.PageSize + 10 // two pages
	create(0, before)
	n, snapshot := count("v1", "")
	if n != before || snapshot == "" {
		t.Fatalf("through v1: %d objects at %q, want %d", n, snapshot, before)
	}
	create(before, before+7)
	if n, _ := count("v1alpha1", snapshot); n != before {
		t.Errorf("through v1alpha1 at resourceVersion %s: %d objects, want the %d of that snapshot", snapshot, n, before)
	}
	if n, _ := count("v1alpha1", ""); n != before+7 {
		t.Errorf("through v1alpha1 now: %d objects, want %d", n, before+7)
	}
}

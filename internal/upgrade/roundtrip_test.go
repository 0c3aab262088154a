package upgrade

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/widgetry/widget-operator/internal/scheme"
)

// TestRoundTripJudgesEachAnswer: the judgement of one dry-run write back (the envtest in
// internal/cli runs it against a real apiserver and webhook): a moved generation and a changed
// field are each reported, an unchanged answer is not, a conflict is counted apart.
func TestRoundTripJudgesEachAnswer(t *testing.T) {
	read := widget("widgetry.io/v1alpha1", map[string]any{"image": "i", "endpoints": []any{}})
	read.SetGeneration(3)
	read.SetResourceVersion("7")
	for _, tc := range []struct {
		name   string
		answer func(*unstructured.Unstructured)
		lossy  string
	}{
		{"unchanged (a new resourceVersion and managedFields do not count)", func(u *unstructured.Unstructured) {
			u.SetResourceVersion("8")
			u.SetManagedFields(nil)
		}, ""},
		{"the stored spec would change", func(u *unstructured.Unstructured) { u.SetGeneration(4) }, "would change the stored spec (generation 3 -> 4)"},
		{"an empty list comes back missing", func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "endpoints") }, "spec.endpoints: [] != (absent)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
				Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
					tc.answer(obj.(*unstructured.Unstructured))
					return nil
				},
			}).Build()
			r := &RoundTripReport{Objects: map[string]int{}}
			if err := r.roundTrip(context.Background(), c, "v1alpha1", read.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.lossy == "" && !r.OK():
				t.Errorf("reported %q", r.Lossy)
			case tc.lossy != "" && (len(r.Lossy) != 1 || !strings.Contains(r.Lossy[0], tc.lossy) || !strings.Contains(r.Lossy[0], "v1alpha1 ns/w")):
				t.Errorf("reported %q, want %q", r.Lossy, tc.lossy)
			}
		})
	}
}

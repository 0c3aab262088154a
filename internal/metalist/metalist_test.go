package metalist

import (
	"context"
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata/fake"
)

var gvr = schema.GroupVersionResource{Group: "widgetry.io", Version: "v1", Resource: "widgets"}

func objects(n int) []runtime.Object {
	objs := make([]runtime.Object, n)
	for i := range objs {
		objs[i] = &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "widgetry.io/v1", Kind: "Widget"},
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%3), Name: fmt.Sprintf("w%d", i)},
		}
	}
	return objs
}

func TestEachVisitsEveryObjectOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	const n = 1234
	md := fake.NewSimpleMetadataClient(scheme, objects(n)...)
	seen := map[string]int{}
	err := Each(context.Background(), md.Resource(gvr), func(o *metav1.PartialObjectMetadata) error {
		seen[o.Namespace+"/"+o.Name]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Errorf("visited %d distinct objects, want %d", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("%s visited %d times", k, c)
		}
	}
}

func TestEachStopsAtTheFirstError(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	md := fake.NewSimpleMetadataClient(scheme, objects(10)...)
	stop := errors.New("stop")
	calls := 0
	err := Each(context.Background(), md.Resource(gvr), func(*metav1.PartialObjectMetadata) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 3 {
		t.Errorf("Each = %v after %d calls, want the callback's error after 3", err, calls)
	}
}

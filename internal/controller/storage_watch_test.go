package controller

import (
	"context"
	"errors"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// fakeController records the sources it is asked to watch and fails with watchErr. Only Watch
// is implemented; any other method panics on the nil embedded interface.
type fakeController struct {
	controller.Controller
	watchErr error
	watched  []source.Source
}

func (f *fakeController) Watch(src source.Source) error {
	f.watched = append(f.watched, src)
	return f.watchErr
}

// fakeCache records the informers removed. Only RemoveInformer is implemented.
type fakeCache struct {
	cache.Cache
	removed []client.Object
}

func (f *fakeCache) RemoveInformer(_ context.Context, obj client.Object) error {
	f.removed = append(f.removed, obj)
	return nil
}

// crdStoring is the Widget CRD with storage set on the named version ("" for none).
func crdStoring(storage string) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{}
	for _, name := range []string{"v1alpha1", "v1", "v2"} {
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: true, Storage: name == storage})
	}
	return c
}

// TestFollowStorageVersion drives the switch of the Widget watch on a storage version flip
// from v1alpha1, with a controller whose Watch may fail: on any failure the reconciler must
// still follow v1alpha1, so the v1alpha1 watch keeps passing events.
func TestFollowStorageVersion(t *testing.T) {
	for _, tc := range []struct {
		name        string
		storage     string
		watchErr    error
		wantErr     bool
		wantStorage string
		wantWatches int
		wantRemoved bool
	}{
		{name: "flip to v1 switches the watch and drops the old informer", storage: "v1", wantStorage: "v1", wantWatches: 1, wantRemoved: true},
		{name: "a failed watch rolls back", storage: "v1", watchErr: errors.New("no kind is registered"), wantErr: true, wantStorage: "v1alpha1", wantWatches: 1},
		{name: "an unknown version is refused before any watch", storage: "v2", wantErr: true, wantStorage: "v1alpha1"},
		{name: "same version: nothing to do", storage: "v1alpha1", wantStorage: "v1alpha1"},
		{name: "no storage version marked: nothing to do", storage: "", wantStorage: "v1alpha1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, cc := &fakeController{watchErr: tc.watchErr}, &fakeCache{}
			r := &WidgetReconciler{Cache: cc, storage: spokeVersion{}, controller: fc}
			oldFilter, newFilter := r.whileStorage(spokeVersion{}), r.whileStorage(hubVersion{})

			err := r.followStorageVersion(context.Background(), crdStoring(tc.storage))
			if (err != nil) != tc.wantErr {
				t.Fatalf("followStorageVersion error = %v, want error %v", err, tc.wantErr)
			}
			if tc.watchErr != nil && !errors.Is(err, tc.watchErr) {
				t.Errorf("error %v does not wrap the Watch error %v", err, tc.watchErr)
			}
			if got := r.currentStorage().name(); got != tc.wantStorage {
				t.Errorf("storage version followed = %s, want %s", got, tc.wantStorage)
			}
			if len(fc.watched) != tc.wantWatches {
				t.Errorf("Watch called %d times, want %d", len(fc.watched), tc.wantWatches)
			}
			ev := event.CreateEvent{Object: &v1alpha1.Widget{}}
			if got, want := oldFilter.Create(ev), tc.wantStorage == "v1alpha1"; got != want {
				t.Errorf("v1alpha1 watch passes events = %v, want %v", got, want)
			}
			if got, want := newFilter.Create(ev), tc.wantStorage == "v1"; got != want {
				t.Errorf("v1 watch passes events = %v, want %v", got, want)
			}
			switch {
			case tc.wantRemoved && (len(cc.removed) != 1 || !isSpoke(cc.removed[0])):
				t.Errorf("removed informers %T, want the v1alpha1 one", cc.removed)
			case !tc.wantRemoved && len(cc.removed) != 0:
				t.Errorf("removed informers %T, want none", cc.removed)
			}
		})
	}
}

// isSpoke: the metadata-only watch object of v1alpha1 Widgets.
func isSpoke(o client.Object) bool {
	m, ok := o.(*metav1.PartialObjectMetadata)
	return ok && m.GroupVersionKind() == v1alpha1.GroupVersion.WithKind("Widget")
}

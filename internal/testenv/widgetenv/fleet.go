package widgetenv

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/crd"
)

// Served lists the Widget versions served at stage, read from crd.ApplyStageFlags (the one
// encoding of the stage table), in the CRD's order.
func Served(stage crd.Stage) []string {
	c := crd.Widget()
	if err := crd.ApplyStageFlags(c, stage); err != nil {
		panic(err) // stage comes from crd.Stages
	}
	var out []string
	for _, v := range c.Spec.Versions {
		if v.Served {
			out = append(out, v.Name)
		}
	}
	return out
}

// Fleet is N Widgets in one namespace written through whichever versions are served and read
// back through every served version: the end-to-end "0 lost fields" proof of a staged
// upgrade. Its methods are not safe for concurrent use (Write itself writes on Workers
// goroutines).
type Fleet struct {
	Client    client.Client
	Namespace string
	N         int
	// Workers is how many Widgets Write writes at once (default 1).
	Workers int

	mu sync.Mutex // guards want while Write runs
	// want is the last written spec of every Widget, as the hub sees it.
	want map[string]v1.WidgetSpec
}

// Len is the number of Widgets written so far.
func (f *Fleet) Len() int { return len(f.want) }

// Forget drops a Widget the caller deleted.
func (f *Fleet) Forget(name string) { delete(f.want, name) }

// Name is the i-th Widget's name.
func (f *Fleet) Name(i int) string { return fmt.Sprintf("w-%03d", i) }

// Write creates (first round) or updates every Widget, alternating the served versions by
// round; v1 writes set what only v1 has (paused, fractional timeouts, endpoint maps). Sizes
// are 0: a Fleet is about the API, not the Widgets' pods.
func (f *Fleet) Write(ctx context.Context, served []string, round int) error {
	if f.want == nil {
		f.want = map[string]v1.WidgetSpec{}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan int)
	var wg sync.WaitGroup
	for range max(f.Workers, 1) {
		wg.Go(func() {
			for i := range work {
				name, version := f.Name(i), served[(i+round)%len(served)]
				if err := retryOnConflict(func() error { return f.writeOne(ctx, name, version, i, round) }); err != nil {
					cancel(fmt.Errorf("write %s/%s through %s: %w", f.Namespace, name, version, err))
				}
			}
		})
	}
	for i := 0; i < f.N && ctx.Err() == nil; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

func (f *Fleet) record(name string, spec v1.WidgetSpec) {
	f.mu.Lock()
	f.want[name] = spec
	f.mu.Unlock()
}

func (f *Fleet) writeOne(ctx context.Context, name, version string, i, round int) error {
	f.mu.Lock()
	_, exists := f.want[name]
	f.mu.Unlock()
	key := client.ObjectKey{Namespace: f.Namespace, Name: name}
	image := fmt.Sprintf("registry.example.com/w:r%d", round)
	save := func(obj client.Object) error {
		if exists {
			return f.Client.Update(ctx, obj)
		}
		return f.Client.Create(ctx, obj)
	}
	if version == "v1alpha1" {
		obj := &v1alpha1.Widget{}
		if exists {
			if err := f.Client.Get(ctx, key, obj); err != nil {
				return err
			}
		} else {
			obj.Namespace, obj.Name = f.Namespace, name
			obj.Spec.TimeoutSeconds = ptr.To(int32(i%300 + 1))
			obj.Spec.Endpoints = []v1alpha1.Endpoint{{Name: "http", Port: 8080}}
		}
		obj.Spec.Image, obj.Spec.Replicas = image, ptr.To[int32](0)
		if err := save(obj); err != nil {
			return err
		}
		hub := &v1.Widget{}
		if err := conversion.ConvertWidgetToHub(ctx, obj, hub); err != nil {
			return err
		}
		f.record(name, hub.Spec)
		return nil
	}
	obj := &v1.Widget{}
	if exists {
		if err := f.Client.Get(ctx, key, obj); err != nil {
			return err
		}
	} else {
		obj.Namespace, obj.Name = f.Namespace, name
	}
	obj.Spec.Image, obj.Spec.Size = image, ptr.To[int32](0)
	obj.Spec.Paused = ptr.To(round%2 == 1)
	obj.Spec.Timeout = ptr.To(fmt.Sprintf("%d.%ds", i%50+1, round%10))
	obj.Spec.Endpoints = map[string]v1.EndpointSpec{"http": {Port: 8080}, fmt.Sprintf("r%d", round): {Port: int32(9000 + round)}}
	if err := save(obj); err != nil {
		return err
	}
	f.record(name, obj.Spec)
	return nil
}

// Verify reads every Widget through every served version and compares it with what was last
// written: 0 lost or changed fields, no Widget missing or extra.
func (f *Fleet) Verify(ctx context.Context, served []string) error {
	for _, version := range served {
		got := map[string]v1.WidgetSpec{}
		if version == "v1" {
			list := &v1.WidgetList{}
			if err := f.Client.List(ctx, list, client.InNamespace(f.Namespace)); err != nil {
				return fmt.Errorf("list through v1: %w", err)
			}
			for _, o := range list.Items {
				got[o.Name] = o.Spec
			}
		} else {
			list := &v1alpha1.WidgetList{}
			if err := f.Client.List(ctx, list, client.InNamespace(f.Namespace)); err != nil {
				return fmt.Errorf("list through %s: %w", version, err)
			}
			for i := range list.Items {
				hub := &v1.Widget{}
				if err := conversion.ConvertWidgetToHub(ctx, &list.Items[i], hub); err != nil {
					return err
				}
				got[list.Items[i].Name] = hub.Spec
			}
		}
		if len(got) != len(f.want) {
			return fmt.Errorf("%d Widgets through %s, want %d", len(got), version, len(f.want))
		}
		for name, want := range f.want {
			if d := conversiontest.Diff(want, got[name]); d != "" {
				return fmt.Errorf("%s read through %s differs from what was last written %s", name, version, d)
			}
		}
	}
	return nil
}

// retryOnConflict retries write while another writer (the controller) races it.
func retryOnConflict(write func() error) error {
	for attempt := 0; ; attempt++ {
		err := write()
		if err == nil || !apierrors.IsConflict(err) || attempt >= 5 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package widgetenv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
)

// CreateWidgets creates n realistic Widgets named widget-00000... in namespace, on 8
// workers: even ones through v1alpha1 (labels, annotations, finalizer, five endpoints), odd
// ones through v1 with what only v1 can hold (a fractional timeout; paused for every other
// one), so that these carry the conversion-data annotation whenever they are stored or read
// as v1alpha1. Every tenth gets a status, written through v1alpha1.
func CreateWidgets(tb testing.TB, c client.Client, namespace string, n int) {
	tb.Helper()
	ctx := context.Background()
	Parallel(tb, 8, n, func(i int) error {
		src := conversiontest.RealisticWidget(namespace, i)
		src.ObjectMeta = metav1.ObjectMeta{Namespace: namespace, Name: src.Name, Labels: src.Labels,
			Annotations: src.Annotations, Finalizers: src.Finalizers}
		status := src.Status
		src.Status = v1alpha1.WidgetStatus{}
		var obj client.Object = src
		if i%2 == 1 {
			hub := &v1.Widget{}
			if err := conversion.ConvertWidgetToHub(ctx, src, hub); err != nil {
				return err
			}
			hub.Spec.Paused = ptr.To(i%4 == 1)
			hub.Spec.Timeout = ptr.To(fmt.Sprintf("%d.5s", i%100+1))
			obj = hub
		}
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
		if i%10 != 0 {
			return nil
		}
		// Status through v1alpha1, whatever the object was created through.
		spoke := &v1alpha1.Widget{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), spoke); err != nil {
			return err
		}
		spoke.Status = status
		return c.Status().Update(ctx, spoke)
	})
}

// Parallel runs f(0..n-1) on the given number of workers and fails the test with the first
// error, once every call has returned.
func Parallel(tb testing.TB, workers, n int, f func(i int) error) {
	tb.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("object %d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		tb.Fatal(firstErr)
	}
}

// EnvInt reads a positive integer from the environment variable name (the sizes of the
// long tests and benchmarks), def when it is unset; anything else fails the test.
func EnvInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

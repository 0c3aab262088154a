//go:build envtest

package webhook_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

func createNamespace(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	if out, err := env.Kubectl(t, "create", "namespace", name); err != nil {
		t.Fatalf("create namespace %s: %v %s", name, err, out)
	}
}

// TestConversionThroughAPIServer drives the real kube-apiserver through the webhook: every
// read and write of the other version converts.
func TestConversionThroughAPIServer(t *testing.T) {
	env := widgetenv.StartWithConversionWebhook(t, "v1", testenv.Options{})
	ctx := context.Background()
	c := env.Client
	createNamespace(t, env, "conv")

	t.Run("create through v1alpha1, read through v1", func(t *testing.T) {
		in := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "alpha", Labels: map[string]string{"l": "v"}},
			Spec: v1alpha1.WidgetSpec{Image: "srv:1", Replicas: ptr.To[int32](0), TimeoutSeconds: ptr.To[int32](90),
				Endpoints: []v1alpha1.Endpoint{{Name: "web", Port: 8080}, {Name: "admin", Port: 9000}}}}
		if err := c.Create(ctx, in); err != nil {
			t.Fatal(err)
		}
		got := &v1.Widget{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(in), got); err != nil {
			t.Fatal(err)
		}
		want := v1.WidgetSpec{Image: "srv:1", Size: ptr.To[int32](0), Timeout: ptr.To("1m30s"),
			Endpoints: map[string]v1.EndpointSpec{"web": {Port: 8080}, "admin": {Port: 9000}}}
		if d := conversiontest.Diff(want, got.Spec); d != "" || got.Labels["l"] != "v" || got.UID != in.UID {
			t.Errorf("v1 view %s labels %v uid %s/%s", d, got.Labels, got.UID, in.UID)
		}
	})

	t.Run("paused and a fractional timeout survive a v1alpha1 update", func(t *testing.T) {
		in := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "hub"},
			Spec: v1.WidgetSpec{Image: "srv:1", Timeout: ptr.To("1.5s"), Paused: ptr.To(true), Endpoints: map[string]v1.EndpointSpec{"b": {Port: 2}, "a": {Port: 1}}}}
		if err := c.Create(ctx, in); err != nil {
			t.Fatal(err)
		}
		old := &v1alpha1.Widget{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(in), old); err != nil {
			t.Fatal(err)
		}
		if *old.Spec.TimeoutSeconds != 2 || old.Spec.Endpoints[0].Name != "a" {
			t.Fatalf("v1alpha1 view: timeoutSeconds %d endpoints %v", *old.Spec.TimeoutSeconds, old.Spec.Endpoints)
		}
		old.Spec.Image = "srv:2" // a v1alpha1 client edits another field and writes the object back
		if err := c.Update(ctx, old); err != nil {
			t.Fatal(err)
		}
		got := &v1.Widget{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(in), got); err != nil {
			t.Fatal(err)
		}
		want := in.Spec.DeepCopy()
		want.Image, want.Size = "srv:2", ptr.To[int32](1) // size defaulted on create
		if d := conversiontest.Diff(*want, got.Spec); d != "" {
			t.Errorf("v1 after a v1alpha1 update lost data %s", d)
		}
		if _, ok := got.Annotations["widgetry.io/conversion-data"]; ok {
			t.Errorf("v1 carries the conversion-data annotation: %v", got.Annotations)
		}

		old.Spec.TimeoutSeconds = ptr.To[int32](10) // a v1alpha1 edit of the timeout wins
		if err := c.Update(ctx, old); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(in), got); err != nil {
			t.Fatal(err)
		}
		if *got.Spec.Timeout != "10s" || !ptr.Deref(got.Spec.Paused, false) {
			t.Errorf("after editing timeoutSeconds: timeout %s paused %v, want 10s and still paused", *got.Spec.Timeout, got.Spec.Paused)
		}
	})

	t.Run("the order a v1alpha1 client wrote survives storage as v1", func(t *testing.T) {
		// A GitOps tool applies this manifest, again and again: with the order lost it would
		// read back [admin, grpc, web], see a difference and write the object forever.
		manifest := filepath.Join(t.TempDir(), "ordered.yaml")
		if err := os.WriteFile(manifest, []byte(`apiVersion: widgetry.io/v1alpha1
kind: Widget
metadata:
  name: ordered
  namespace: conv
spec:
  image: srv:1
  endpoints:
    - name: web
      port: 8080
    - name: admin
      port: 9000
    - name: grpc
      port: 9090
`), 0o600); err != nil {
			t.Fatal(err)
		}
		apply := func() {
			t.Helper()
			if out, err := env.Kubectl(t, "apply", "--server-side", "--field-manager=gitops", "-f", manifest); err != nil {
				t.Fatalf("kubectl apply --server-side: %v %s", err, out)
			}
		}
		names := func() ([]string, string) {
			t.Helper()
			got := &v1alpha1.Widget{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "conv", Name: "ordered"}, got); err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range got.Spec.Endpoints {
				out = append(out, e.Name)
			}
			return out, got.ResourceVersion
		}
		apply()
		order, rv := names()
		if strings.Join(order, ",") != "web,admin,grpc" {
			t.Fatalf("v1alpha1 endpoints read back %v, want the order written: web, admin, grpc", order)
		}
		if out, err := env.Kubectl(t, "diff", "--server-side", "--field-manager=gitops", "-f", manifest); err != nil {
			t.Fatalf("kubectl diff of the manifest just applied: %v\n%s", err, out)
		}
		apply()
		if _, again := names(); again != rv {
			t.Fatalf("applying the same manifest again wrote the object (resourceVersion %s -> %s)", rv, again)
		}

		// A v1 client adds an endpoint: the order kept names what it knows, the new one follows.
		if err := c.Patch(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "ordered"}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"endpoints":{"metrics":{"port":9100}}}}`))); err != nil {
			t.Fatal(err)
		}
		if order, _ := names(); strings.Join(order, ",") != "web,admin,grpc,metrics" {
			t.Fatalf("after a v1 client added metrics: v1alpha1 endpoints %v, want web, admin, grpc, metrics", order)
		}
	})

	t.Run("defaults agree across versions", func(t *testing.T) {
		a := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "defaults-a"}, Spec: v1alpha1.WidgetSpec{Image: "srv:1"}}
		b := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "defaults-b"}, Spec: v1.WidgetSpec{Image: "srv:1"}}
		if err := c.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"defaults-a", "defaults-b"} {
			got := &v1.Widget{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "conv", Name: name}, got); err != nil {
				t.Fatal(err)
			}
			if *got.Spec.Size != 1 || *got.Spec.Timeout != "30s" || got.Spec.Endpoints != nil || got.Spec.Paused != nil {
				t.Errorf("%s: defaults %+v, want size 1, timeout 30s, no endpoints, not paused", name, got.Spec)
			}
		}
	})

	t.Run("validation refuses what neither version can hold", func(t *testing.T) {
		for _, tc := range []struct {
			obj  client.Object
			want string
		}{
			{&v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "zero"}, Spec: v1.WidgetSpec{Image: "i", Timeout: ptr.To("0s")}}, "timeout must be a positive duration"},
			{&v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "long"}, Spec: v1.WidgetSpec{Image: "i", Timeout: ptr.To("25h")}}, "at most 24h"},
			{&v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "garbage"}, Spec: v1.WidgetSpec{Image: "i", Timeout: ptr.To("soon")}}, "spec.timeout"},
			{&v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "t0"}, Spec: v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](0)}}, "spec.timeoutSeconds"},
			{&v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "port"}, Spec: v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "a", Port: 0}}}}, "spec.endpoints[0].port"},
			{&v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "port1"}, Spec: v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{"a": {Port: 70000}}}}, "spec.endpoints.a.port"},
			{&v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "blank"}, Spec: v1.WidgetSpec{Image: "  "}}, "image must not be empty"},
			{&v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "conv", Name: "dup"}, Spec: v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "a", Port: 1}, {Name: "a", Port: 2}}}}, "Duplicate value"},
		} {
			err := c.Create(ctx, tc.obj)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want a refusal mentioning %q", tc.obj.GetName(), err, tc.want)
			}
		}
	})

	t.Run("kubectl scale changes size", func(t *testing.T) {
		if out, err := env.Kubectl(t, "-n", "conv", "scale", "widgets.v1alpha1.widgetry.io/alpha", "--replicas=4"); err != nil {
			t.Fatalf("kubectl scale: %v %s", err, out)
		}
		got := &v1.Widget{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "conv", Name: "alpha"}, got); err != nil {
			t.Fatal(err)
		}
		if *got.Spec.Size != 4 {
			t.Errorf("size %d after kubectl scale --replicas=4", *got.Spec.Size)
		}
	})

	t.Run("LIST of 1,000 Widgets written through both versions", func(t *testing.T) {
		createNamespace(t, env, "list")
		const n = 1000
		written := make([]*v1.Widget, n)
		createAll(t, n, func(i int) error {
			src := conversiontest.RealisticWidget("list", i)
			src.ObjectMeta = metav1.ObjectMeta{Namespace: "list", Name: src.Name, Labels: src.Labels}
			src.Status = v1alpha1.WidgetStatus{}
			if i%2 == 0 {
				hub := &v1.Widget{ObjectMeta: src.ObjectMeta, Spec: v1.WidgetSpec{Image: src.Spec.Image, Size: src.Spec.Replicas,
					Timeout: ptr.To(fmt.Sprintf("%d.5s", i%100+1)), Paused: ptr.To(i%4 == 0), Endpoints: map[string]v1.EndpointSpec{"http": {Port: 8080}}}}
				written[i] = hub.DeepCopy()
				return c.Create(ctx, hub)
			}
			written[i] = &v1.Widget{Spec: v1.WidgetSpec{Image: src.Spec.Image, Size: src.Spec.Replicas,
				Timeout: ptr.To((time.Duration(*src.Spec.TimeoutSeconds) * time.Second).String())}}
			written[i].Spec.Endpoints = map[string]v1.EndpointSpec{}
			for _, e := range src.Spec.Endpoints {
				written[i].Spec.Endpoints[e.Name] = v1.EndpointSpec{Port: e.Port}
			}
			return c.Create(ctx, src)
		})
		hubs := &v1.WidgetList{}
		if err := c.List(ctx, hubs, client.InNamespace("list")); err != nil {
			t.Fatal(err)
		}
		spokes := &v1alpha1.WidgetList{}
		if err := c.List(ctx, spokes, client.InNamespace("list")); err != nil {
			t.Fatal(err)
		}
		if len(hubs.Items) != n || len(spokes.Items) != n {
			t.Fatalf("LIST returned %d through v1 and %d through v1alpha1, want %d", len(hubs.Items), len(spokes.Items), n)
		}
		byName := map[string]int{}
		for i := range n {
			byName[fmt.Sprintf("widget-%05d", i)] = i
		}
		for k := range hubs.Items {
			got := &hubs.Items[k]
			if d := conversiontest.Diff(written[byName[got.Name]].Spec, got.Spec); d != "" {
				t.Fatalf("%s through v1 %s", got.Name, d)
			}
			if spokes.Items[k].Name != got.Name || *spokes.Items[k].Spec.Replicas != *got.Spec.Size {
				t.Fatalf("v1alpha1 item %d is %s with replicas %d, v1 item is %s with size %d", k, spokes.Items[k].Name, *spokes.Items[k].Spec.Replicas, got.Name, *got.Spec.Size)
			}
		}
	})
}

// createAll runs create(0..n-1) on 8 workers and fails the test on the first error.
func createAll(t *testing.T, n int, create func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := create(i); err != nil {
					errs <- fmt.Errorf("object %d: %w", i, err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

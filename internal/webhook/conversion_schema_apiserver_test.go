//go:build envtest

package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/conversion/conversiontest/schemagen"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// schemaObjects is how many drawn objects each direction writes through the apiserver.
const schemaObjects = 400

// TestSchemaObjectsThroughAPIServer: objects drawn from each version's schema (schemagen, at
// every bound it reaches: longest strings, largest integers, fullest lists and maps, unicode)
// are written through one version, spec on create and status through the status
// subresource, with the other version as storage; each reads back through its own version as
// written (the apiserver's defaults applied), through the other one as an object its schema
// admits; LIST and the start of a watch through both versions carry all of them; and the
// namespace controller deletes the namespaces that hold them.
func TestSchemaObjectsThroughAPIServer(t *testing.T) {
	env := widgetenv.StartWithConversionWebhook(t, "v1", testenv.Options{ControllerManager: true})
	dyn := dynamic.NewForConfigOrDie(env.Config)
	ctx := t.Context()
	versions := map[string]*schemagen.Version{}
	for _, v := range []string{"v1alpha1", "v1"} {
		var err error
		if versions[v], err = schemagen.VersionOf(crd.Widget(), v); err != nil {
			t.Fatal(err)
		}
	}
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "widgetry.io", Version: v, Resource: "widgets"}
	}
	for i, step := range []struct{ from, to string }{{"v1alpha1", "v1"}, {"v1", "v1alpha1"}} {
		ns := "schema-" + step.from
		t.Run("write "+step.from+" stored as "+step.to, func(t *testing.T) {
			createNamespace(t, env, ns)
			// Stored in the other version, so that the write converts too.
			widgetenv.SetStorageVersion(t, env, step.to, ns)
			g := schemagen.New(int64(10 + i))
			for n := range schemaObjects {
				drawn, err := g.Object(versions[step.from], ns, fmt.Sprintf("w-%03d", n))
				if err != nil {
					t.Fatal(err)
				}
				want := writeDrawn(ctx, t, dyn.Resource(gvr(step.from)).Namespace(ns), drawn)
				versions[step.from].Default(want)
				got, err := dyn.Resource(gvr(step.from)).Namespace(ns).Get(ctx, fmt.Sprintf("w-%03d", n), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if d := userFields(got.Object); !reflect.DeepEqual(d, userFields(want)) {
					b, _ := json.Marshal(d)
					t.Fatalf("%s read back through %s differs from what was written\nwritten: %.3000s\nread:    %.3000s", got.GetName(), step.from, drawn, b)
				}
				other, err := dyn.Resource(gvr(step.to)).Namespace(ns).Get(ctx, got.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("%s through %s: %v", got.GetName(), step.to, err)
				}
				b, _ := json.Marshal(other.Object)
				if err := versions[step.to].Validate(b); err != nil {
					t.Fatalf("%s read through %s is not an object its schema admits: %v\n%.3000s", got.GetName(), step.to, err, b)
				}
			}
			if missing := g.Missing(); len(missing) > 0 {
				t.Logf("bounds not drawn in %d objects here (the unit tier's 10,000 reach all): %q", g.Drawn, missing)
			}
			t.Logf("%d objects written through %s, stored as %s, read through both", g.Drawn, step.from, step.to)
		})
	}
	for _, v := range []string{"v1alpha1", "v1"} {
		for _, ns := range []string{"schema-v1alpha1", "schema-v1"} {
			list, err := dyn.Resource(gvr(v)).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil || len(list.Items) != schemaObjects {
				t.Fatalf("LIST %s through %s: %d objects, %v; want %d", ns, v, len(list.Items), err, schemaObjects)
			}
			// A watch from resourceVersion 0 starts with every object, converted.
			w, err := dyn.Resource(gvr(v)).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				t.Fatalf("watch %s through %s: %v", ns, v, err)
			}
			added := 0
			for added < schemaObjects {
				select {
				case e := <-w.ResultChan():
					if e.Type != watch.Added {
						t.Fatalf("watch %s through %s: %s event after %d objects: %v", ns, v, e.Type, added, e.Object)
					}
					added++
				case <-time.After(30 * time.Second):
					t.Fatalf("watch %s through %s: %d of %d objects in 30s", ns, v, added, schemaObjects)
				}
			}
			w.Stop()
		}
	}
	for _, ns := range []string{"schema-v1alpha1", "schema-v1"} {
		if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, ns := range []string{"schema-v1alpha1", "schema-v1"} {
		for {
			err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("namespace %s still there after 2 minutes (%v): the namespace controller could not delete its Widgets", ns, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// writeDrawn creates drawn (JSON) and writes its status through the status subresource, and
// returns drawn decoded, as the apiserver reads it.
func writeDrawn(ctx context.Context, t *testing.T, r dynamic.ResourceInterface, drawn []byte) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := kjson.Unmarshal(drawn, &obj); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: deepCopyJSON(obj)}
	created, err := r.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %.3000s: %v", drawn, err)
	}
	if status, ok := obj["status"]; ok {
		created.Object["status"] = deepCopyJSON(map[string]any{"s": status})["s"]
		if _, err := r.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("status of %.3000s: %v", drawn, err)
		}
	}
	return obj
}

func deepCopyJSON(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

// userFields is what a client wrote of an object: labels, annotations, spec and status.
func userFields(obj map[string]any) map[string]any {
	meta, _ := obj["metadata"].(map[string]any)
	return map[string]any{"labels": meta["labels"], "annotations": meta["annotations"], "spec": obj["spec"], "status": obj["status"]}
}

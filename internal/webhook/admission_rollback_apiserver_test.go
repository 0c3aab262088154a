//go:build envtest

package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/monitoring"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// TestHandlersAfterRollback: a rollback to the chart before matchConditions installs the same
// webhook configurations without them, so the apiserver calls the handlers for every UPDATE,
// the ones the matchConditions skip included. Here those configurations, rendered from the
// chart for this apiserver with their matchConditions stripped, call the real Defaulter and
// Validator, at add-version (both versions served, conversion through the real handler).
// Through either version both handlers are called for, and admit, the writes the
// matchConditions skip (widgetenv.SkippedWrites: ownerReferences added and removed, the
// finalizer removed from a Widget being deleted). Of a v1alpha1 Widget whose conversion-data
// annotation conversion cannot read (stored while the webhooks were absent), the finalizer
// removal while it is being deleted is admitted, but a metadata-only update (a label, an
// ownerReference) is refused by the Defaulter, which cannot decode the object, until a write
// removes the annotation; the matchConditions never send those to it.
func TestHandlersAfterRollback(t *testing.T) {
	env, _ := widgetenv.StartAtStage(t, crd.StageAddVersion, testenv.Options{})
	ctx := context.Background()
	const ns = "rolled-back"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// Before the webhooks (the Validator refuses to create them): Widgets whose conversion
	// data is malformed, one to delete.
	for _, name := range []string{"malformed", "malformed-deleting"} {
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{controller.Finalizer},
			Annotations: map[string]string{conversion.DataAnnotation: `{"paused":tru`}}, Spec: v1alpha1.WidgetSpec{Image: "registry.example.com/malformed:v1"}}
		if err := env.Client.Create(ctx, w); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	probe := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Spec: v1alpha1.WidgetSpec{Image: "registry.example.com/probe:v1"}}
	if err := env.Client.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}

	handlers := widgetenv.ServeAdmissionHandlers(t)
	widgetenv.RenderChartWebhooks(t, widgetenv.DiscoveredAPIVersions(t, env), nil).WithoutMatchConditions().Install(t, env, handlers.URL, handlers.CA.PEM)
	label := func(name string, n int) error {
		return env.Client.Patch(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"touched":"%d"}}}`, n)))
	}
	n := 0
	testenv.Eventually(t, 30*time.Second, "both handlers called for a label change", func() error {
		n++
		if err := label(probe.Name, n); err != nil {
			return err
		}
		if handlers.Calls(webhook.MutatePath) == 0 || handlers.Calls(webhook.ValidatePath) == 0 {
			return fmt.Errorf("the Defaulter answered %d reviews, the Validator %d", handlers.Calls(webhook.MutatePath), handlers.Calls(webhook.ValidatePath))
		}
		return nil
	})

	for _, version := range []string{"v1alpha1", "v1"} {
		t.Run("skipped writes through "+version, func(t *testing.T) {
			mutated, validated := handlers.Calls(webhook.MutatePath), handlers.Calls(webhook.ValidatePath)
			writes := widgetenv.SkippedWrites(t, env.Client, version, ns, "skipped-"+version)
			for _, w := range writes {
				if w.Err != nil {
					t.Errorf("%s through %s, the handlers called: %v", w.Name, version, w.Err)
				}
			}
			// Every update went through the Defaulter, the create and every update through the
			// Validator: the handlers admitted them, not the apiserver past them.
			if got := handlers.Calls(webhook.MutatePath) - mutated; got < int64(len(writes)) {
				t.Errorf("the Defaulter answered %d reviews for %d updates", got, len(writes))
			}
			if got := handlers.Calls(webhook.ValidatePath) - validated; got < int64(len(writes))+1 {
				t.Errorf("the Validator answered %d reviews for a create and %d updates", got, len(writes))
			}
			if !t.Failed() {
				widgetGone(t, env.Client, ns, "skipped-"+version)
			}
		})
	}

	t.Run("malformed conversion data", func(t *testing.T) {
		refusedByDefaulter := func(what string, err error) {
			t.Helper()
			if err == nil || !strings.Contains(err.Error(), `admission webhook "`+monitoring.MutatingWebhookName+`" denied the request`) ||
				!strings.Contains(err.Error(), "is not valid conversion data") {
				t.Errorf("%s of a Widget with malformed conversion data: got %v, want the Defaulter's refusal naming the annotation", what, err)
			}
		}
		refusedByDefaulter("a label change", label("malformed", 1))
		owned := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":%q}]}}`, probe.UID)
		refusedByDefaulter("an ownerReference added", env.Client.Patch(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "malformed"}},
			client.RawPatch(types.MergePatchType, []byte(owned))))

		// The way out: a write that removes the annotation is admitted, and then so is the label.
		repair := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, conversion.DataAnnotation)
		if err := env.Client.Patch(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "malformed"}}, client.RawPatch(types.MergePatchType, []byte(repair))); err != nil {
			t.Errorf("removing the malformed annotation: %v", err)
		} else if err := label("malformed", 2); err != nil {
			t.Errorf("a label change once the annotation is gone: %v", err)
		}

		// Being deleted, it can always lose its finalizer.
		deleting := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "malformed-deleting"}}
		if err := env.Client.Delete(ctx, deleting); err != nil {
			t.Fatal(err)
		}
		mutated := handlers.Calls(webhook.MutatePath)
		if err := env.Client.Patch(ctx, deleting, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
			t.Fatalf("removing the finalizer of a Widget with malformed conversion data being deleted: %v", err)
		}
		if handlers.Calls(webhook.MutatePath) == mutated {
			t.Errorf("the Defaulter was not called for the finalizer removal")
		}
		widgetGone(t, env.Client, ns, deleting.Name)
	})
}

// widgetGone waits until the Widget ns/name no longer exists.
func widgetGone(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "Widget "+ns+"/"+name+" deleted", func() error {
		w := &v1alpha1.Widget{}
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, w)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there: deletionTimestamp %v, finalizers %v", w.DeletionTimestamp, w.Finalizers)
	})
}

//go:build envtest

package webhook_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// legacyImage is not an image reference (uppercase repository path): the CRD's image rule
// and the validating webhook refuse it in a create or as a new value. An older CRD, without
// the rule, let it in.
const legacyImage = "team/Server:v1"

// TestLegacyWidgetIsMigratedAndDeleted: a Widget stored under an older CRD without the image
// rule while the admission webhooks were absent, with an image both now refuse, is still
// migrated to the new storage version, loses its finalizer (the controller's update is
// admitted) and is deleted; only a change of the invalid field itself is refused (the
// apiserver's CRD validation ratcheting, and the webhook's own).
func TestLegacyWidgetIsMigratedAndDeleted(t *testing.T) {
	const ns = "legacy"
	env, op, manager := startOperator(t, ns)
	ctx := context.Background()
	c, seen := warningClient(t, env)

	restore := removeWebhookConfigurations(t, env.Client)
	setImageRule(t, env.Client, false)
	legacy := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"}, Spec: v1alpha1.WidgetSpec{Image: legacyImage}}
	// Until the apiserver has noticed the removal, the webhook refuses the create.
	testenv.Eventually(t, 30*time.Second, "create the legacy Widget with the webhooks gone", func() error {
		return c.Create(ctx, legacy.DeepCopy())
	})
	key := client.ObjectKeyFromObject(legacy)
	testenv.Eventually(t, 30*time.Second, "the controller adds its finalizer", func() error {
		got := &v1alpha1.Widget{}
		if err := c.Get(ctx, key, got); err != nil {
			return err
		}
		if !slices.Contains(got.Finalizers, controller.Finalizer) {
			return fmt.Errorf("finalizers %v", got.Finalizers)
		}
		return nil
	})
	restore()
	setImageRule(t, env.Client, true)
	testenv.Eventually(t, 30*time.Second, "the CRD refuses the image again", func() error {
		probe := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Spec: v1alpha1.WidgetSpec{Image: legacyImage}}
		if err := c.Create(ctx, probe, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "must be a container image reference") {
			return fmt.Errorf("dry-run create: %w", err)
		}
		return nil
	})
	t.Run("changing the invalid image to another invalid one is refused", func(t *testing.T) {
		err := update(ctx, c, key, func(w *v1alpha1.Widget) { w.Spec.Image = "team/Other:v1" })
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.image") {
			t.Errorf("got %v, want the image refused", err)
		}
	})
	t.Run("an update that leaves the image alone is admitted with a warning", func(t *testing.T) {
		// The CRD ratchets silently; the warning is the validating webhook's, which fails
		// open, so the first updates after the restore may pass before the apiserver calls it.
		n := 0
		testenv.Eventually(t, 30*time.Second, "the webhook's ratchet warning", func() error {
			n++
			seen.take()
			if err := update(ctx, c, key, func(w *v1alpha1.Widget) { w.Labels = map[string]string{"touched": strconv.Itoa(n)} }); err != nil {
				t.Fatal(err)
			}
			if got := seen.take(); !strings.Contains(got, "admitted because this update does not change it") {
				return fmt.Errorf("warnings %q", got)
			}
			return nil
		})
	})

	t.Run("migrated to v1", func(t *testing.T) {
		op.SetStage(t, crd.StageFlipStorage)
		widgetenv.WaitForStorageVersion(t, env, "v1", ns)
		etcd := widgetenv.NewEtcd(env)
		if stored, err := etcd.Get(ctx, widgetenv.WidgetKey(ns, "legacy")); err != nil || widgetenv.APIVersion(stored) != "widgetry.io/v1alpha1" {
			t.Fatalf("before the migration etcd holds %s (%v), want v1alpha1", widgetenv.APIVersion(stored), err)
		}
		mcfg := rest.CopyConfig(env.Config)
		mcfg.QPS, mcfg.Burst = migrate.DefaultQPS, migrate.DefaultBurst
		m, err := migrate.New(mcfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: widgetenv.Namespace, Backend: migrate.BackendClient})
		if err != nil {
			t.Fatalf("migrate: %v (%+v)", err, res)
		}
		if stored, err := etcd.Get(ctx, widgetenv.WidgetKey(ns, "legacy")); err != nil || widgetenv.APIVersion(stored) != "widgetry.io/v1" {
			t.Errorf("after the migration etcd holds %s (%v), want v1", widgetenv.APIVersion(stored), err)
		}
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(live.Status.StoredVersions, []string{"v1"}) {
			t.Errorf("storedVersions %v, want [v1]", live.Status.StoredVersions)
		}
	})

	t.Run("deleted: the controller's finalizer removal is admitted", func(t *testing.T) {
		if err := c.Delete(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"}}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, "the legacy Widget is gone (manager log "+manager.LogFile+")", func() error {
			got := &v1alpha1.Widget{}
			if err := c.Get(ctx, key, got); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (finalizers %v): %w", got.Finalizers, err)
			}
			return nil
		})
	})
}

// setImageRule puts the CRD's image-grammar rule back into both versions of the live CRD, or
// takes it out, as an older chart's CRD had it.
func setImageRule(t *testing.T, c client.Client, present bool) {
	t.Helper()
	want := crd.Widget()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("set the CRD's image rule (present %v)", present), func() error {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			return err
		}
		for i := range live.Spec.Versions {
			image := live.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"].Properties["image"]
			rules := crd.Version(want, live.Spec.Versions[i].Name).Schema.OpenAPIV3Schema.Properties["spec"].Properties["image"].XValidations
			if !present {
				rules = slices.DeleteFunc(slices.Clone(rules), func(r apiextensionsv1.ValidationRule) bool {
					return strings.Contains(r.Rule, "matches(")
				})
			}
			image.XValidations = rules
			live.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"].Properties["image"] = image
		}
		return c.Update(context.Background(), live)
	})
}

// update reads the Widget through v1alpha1, changes it and writes it back, retrying on
// conflicts with the controller's writes.
func update(ctx context.Context, c client.Client, key client.ObjectKey, change func(*v1alpha1.Widget)) error {
	for {
		w := &v1alpha1.Widget{}
		if err := c.Get(ctx, key, w); err != nil {
			return err
		}
		change(w)
		if err := c.Update(ctx, w); !apierrors.IsConflict(err) {
			return err
		}
	}
}

// removeWebhookConfigurations deletes the admission webhook configurations widgetenv.Setup
// installed, as if the webhooks had never been installed, and returns the function that
// puts them back.
func removeWebhookConfigurations(t *testing.T, c client.Client) (restore func()) {
	t.Helper()
	ctx := context.Background()
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	saved := []client.Object{mutating, validating}
	for _, obj := range saved {
		if err := c.Get(ctx, client.ObjectKey{Name: "widget-operator"}, obj); err != nil {
			t.Fatalf("read %T: %v", obj, err)
		}
		if err := c.Delete(ctx, obj); err != nil {
			t.Fatalf("delete %T: %v", obj, err)
		}
	}
	return func() {
		t.Helper()
		for _, obj := range saved {
			obj.SetResourceVersion("")
			obj.SetUID("")
			obj.SetCreationTimestamp(metav1.Time{})
			obj.SetManagedFields(nil)
			if err := c.Create(ctx, obj); err != nil {
				t.Fatalf("restore %T: %v", obj, err)
			}
		}
	}
}

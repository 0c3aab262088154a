//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// refusedUninstall: at a stage where two versions are served, helm uninstall is refused by the
// pre-delete hook before anything changes — the release is still deployed, the CRD and every
// Widget as they were, the controller not paused — with the way out named.
func (w *e2e) refusedUninstall(stage crd.Stage) {
	w.t.Helper()
	before := w.crd()
	out, err := w.runHelm("uninstall", "widget-operator", "--wait", "--timeout", "3m")
	if err == nil {
		w.t.Fatalf("helm uninstall at %s succeeded:\n%s", stage, out)
	}
	for _, want := range []string{"uninstall refused before any change", "runbooks/upgrade/unserve.md", "allowUnsafeUninstall=true"} {
		if !strings.Contains(out, want) {
			w.t.Errorf("the refused uninstall at %s does not say %q:\n%s", stage, want, out)
		}
	}
	// Helm marks the release uninstalling before it runs the pre-delete hook; a rollback to
	// the same revision (the same stage) marks it deployed again, as the refusal says.
	rev, status := w.release()
	if status != "uninstalling" && status != "deployed" {
		w.t.Errorf("after the refused uninstall at %s the release is %s", stage, status)
	}
	w.mustHelm("rollback", "widget-operator", strconv.Itoa(rev), "--wait", "--timeout", "3m")
	if _, status := w.release(); status != "deployed" {
		w.t.Errorf("after the rollback to revision %d the release is %s", rev, status)
	}
	if after := w.crd(); after.ResourceVersion != before.ResourceVersion {
		w.t.Errorf("the refused uninstall at %s changed the CRD", stage)
	}
	err = w.cl.Get(w.t.Context(), client.ObjectKey{Namespace: releaseNamespace, Name: controller.PausedConfigMap}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		w.t.Errorf("after the refused uninstall at %s the pause marker: %v, want NotFound", stage, err)
	}
	w.verify(stage)
}

// release returns the release's last revision and its status.
func (w *e2e) release() (int, string) {
	w.t.Helper()
	var history []struct {
		Revision int    `json:"revision"`
		Status   string `json:"status"`
	}
	out := w.mustHelm("history", "widget-operator", "-o", "json", "--max", "1")
	if err := json.Unmarshal([]byte(out), &history); err != nil || len(history) == 0 {
		w.t.Fatalf("helm history: %v\n%s", err, out)
	}
	return history[len(history)-1].Revision, history[len(history)-1].Status
}

// doomedWidgets creates a namespace holding two Widgets (through the first served version) and
// waits until the controller has put its finalizer on both, so that the namespace's deletion
// after the uninstall needs the finalizers gone, the garbage collector and reads through a
// served version.
func (w *e2e) doomedWidgets(stage crd.Stage) string {
	w.t.Helper()
	ns := w.ns + "-doomed"
	ensureNamespace(w.t, w.c, ns)
	version := widgetenv.Served(stage)[0]
	size := "size"
	if version == "v1alpha1" {
		size = "replicas"
	}
	for _, name := range []string{"a", "b"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "widgetry.io/" + version, "kind": "Widget",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec":     map[string]any{"image": "registry.example.com/doomed:v1", size: int64(0)},
		}}
		if err := w.cl.Create(w.t.Context(), u); err != nil {
			w.t.Fatal(err)
		}
	}
	testenv.Eventually(w.t, time.Minute, "the controller finalizes the doomed Widgets", func() error {
		for _, name := range []string{"a", "b"} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("widgetry.io/" + version)
			u.SetKind("Widget")
			if err := w.cl.Get(w.t.Context(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
				return err
			}
			if !slices.Contains(u.GetFinalizers(), controller.Finalizer) {
				return fmt.Errorf("%s has no finalizer yet", name)
			}
		}
		return nil
	})
	return ns
}

// uninstallKeepsWidgets: helm uninstall at stage keeps the CRD and every Widget, readable through
// every served version, without the catalog finalizer; the catalog goes; a Widget and a
// namespace holding Widgets can be deleted afterwards.
func (w *e2e) uninstallKeepsWidgets(stage crd.Stage) {
	w.t.Helper()
	doomed := w.doomedWidgets(stage)
	w.mustHelm("uninstall", "widget-operator", "--wait", "--timeout", "3m")
	if w.crd() == nil {
		w.t.Fatal("uninstall deleted the CRD")
	}
	served := widgetenv.Served(stage)
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("widgetry.io/" + served[0])
	list.SetKind("WidgetList")
	if err := w.cl.List(w.t.Context(), list, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	if len(list.Items) != w.fleet.Len() {
		w.t.Errorf("%d Widgets after uninstall at %s, want %d", len(list.Items), stage, w.fleet.Len())
	}
	var kept []string
	for _, o := range list.Items {
		if slices.Contains(o.GetFinalizers(), controller.Finalizer) {
			kept = append(kept, o.GetName())
		}
	}
	w.verify(stage)
	if len(kept) > 0 {
		w.t.Fatalf("%d of %d Widgets kept %s after helm uninstall at %s (the pre-delete hook pauses the controller, then removes it): %v",
			len(kept), len(list.Items), controller.Finalizer, stage, kept)
	}
	if out := w.c.Kubectl(w.t, "-n", releaseNamespace, "get", "configmaps", "-l", controller.CatalogLabel+"=true", "-o", "name"); strings.TrimSpace(out) != "" {
		w.t.Errorf("catalog entries left after uninstall at %s:\n%s", stage, out)
	}
	// With no controller left, deleting a Widget completes...
	victim := &unstructured.Unstructured{}
	victim.SetAPIVersion("widgetry.io/" + served[0])
	victim.SetKind("Widget")
	victim.SetNamespace(w.ns)
	victim.SetName(w.fleet.Name(0))
	if err := w.cl.Delete(w.t.Context(), victim); err != nil {
		w.t.Fatal(err)
	}
	testenv.Eventually(w.t, 30*time.Second, "Widget w-000 deleted after uninstall", func() error {
		err := w.cl.Get(w.t.Context(), client.ObjectKeyFromObject(victim), victim)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (finalizers %v): %w", victim.GetFinalizers(), err)
	})
	w.fleet.Forget(w.fleet.Name(0))
	// ...and so does deleting a namespace holding Widgets (the namespace controller lists and
	// deletes them through a served version, the garbage collector their children).
	if err := w.cl.Delete(w.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomed}}); err != nil {
		w.t.Fatal(err)
	}
	testenv.Eventually(w.t, 2*time.Minute, "namespace "+doomed+" deleted after uninstall", func() error {
		ns := &corev1.Namespace{}
		err := w.cl.Get(w.t.Context(), client.ObjectKey{Name: doomed}, ns)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%s, conditions %v): %w", ns.Status.Phase, ns.Status.Conditions, err)
	})
}

//go:build envtest

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/backup"
	"github.com/widgetry/widget-operator/internal/cli"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestRestoreAndDrill: a backup taken after the storage flip is drilled into scratch
// namespaces (every object created, read back through both versions as backed up, recorded
// beside the backup's record); after Widgets were deleted and others edited, restore --dry-run
// reports and stores nothing, restore brings every object back (owner references and a foreign
// finalizer as recorded) and verify --against is clean; a second restore writes nothing; an
// owner gone since the backup has its reference dropped, and verify names exactly that.
func TestRestoreAndDrill(t *testing.T) {
	env, _ := widgetenv.StartAtStage(t, crd.StageAddVersion, testenv.Options{})
	ctx := context.Background()
	for _, ns := range []string{"widget-system", "fleet", "team-b"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	owners := map[string]*corev1.ConfigMap{}
	for _, name := range []string{"kept-owner", "gone-owner"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		owners[name] = cm
	}
	ownedBy := func(name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: owners[name].UID}}
	}
	// Through both versions, in two namespaces (the same names in each: the drill keeps them
	// apart), with labels, annotations, a foreign finalizer, v1-only fields and unsorted
	// endpoints written through v1alpha1 (kept in the conversion data).
	for i := range 24 {
		ns := []string{"fleet", "team-b"}[i%2]
		meta := metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w-%02d", i/2), Labels: map[string]string{"team": ns},
			Annotations: map[string]string{"note": fmt.Sprint(i)}}
		switch i {
		case 0:
			meta.OwnerReferences = ownedBy("kept-owner")
		case 2:
			meta.OwnerReferences = ownedBy("gone-owner")
		case 4:
			meta.Finalizers = []string{"example.com/keep"}
		}
		var obj client.Object
		if i%3 == 0 {
			obj = &v1.Widget{ObjectMeta: meta, Spec: v1.WidgetSpec{Image: "srv:1", Size: ptr.To(int32(i % 3)), Paused: ptr.To(i%4 == 0), Timeout: ptr.To("1.5s")}}
		} else {
			obj = &v1alpha1.Widget{ObjectMeta: meta, Spec: v1alpha1.WidgetSpec{Image: "srv:1", Replicas: ptr.To(int32(i % 3)), TimeoutSeconds: ptr.To(int32(i)),
				Endpoints: []v1alpha1.Endpoint{{Name: "http", Port: 8080}, {Name: "admin", Port: 9090}}}}
		}
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	setStage(t, env, crd.StageFlipStorage)

	expect := expectExit(t, env)
	dir := filepath.Join(t.TempDir(), "after-the-flip")
	expect(cli.ExitDone, "backup", "--out", dir, "--records-namespace", "widget-system")

	// The drill: every object created in the scratch namespaces and read back as backed up.
	out := expect(cli.ExitDone, "restore", "--from", dir, "--drill", "--drill-prefix", "drill-a", "--keep", "--records-namespace", "widget-system")
	for _, want := range []string{"namespace fleet drilled as drill-a-0", "namespace team-b drilled as drill-a-1", "v1alpha1   24 objects read back", "v1         24 objects read back",
		"24 objects created through v1", "ok: the backup restores every object"} {
		if !strings.Contains(out, want) {
			t.Errorf("drill lacks %q:\n%s", want, out)
		}
	}
	got := &v1.Widget{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "drill-a-0", Name: "w-02"}, got); err != nil || len(got.Finalizers) != 0 || got.Labels["team"] != "fleet" {
		t.Errorf("a drilled object (no finalizers, its labels): %+v %v", got.ObjectMeta, err)
	}
	d, err := backup.LastDrill(ctx, env.Client, "widget-system", crd.WidgetName)
	if err != nil || d == nil || !d.OK || d.Objects != 24 || d.Dir != dir {
		t.Errorf("the drill record: %+v %v", d, err)
	}
	if out := expect(cli.ExitRefused, "restore", "--from", dir, "--drill", "--drill-prefix", "drill-a", "--records-namespace", "widget-system"); !strings.Contains(out, "the scratch namespace exists: drill-a-0") {
		t.Errorf("a drill into namespaces that exist: %s", out)
	}

	// What happens to a fleet: two deleted, two edited (spec, labels), one deleted and created
	// again with another spec.
	for _, name := range []string{"w-01", "w-05"} {
		if err := env.Client.Delete(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	edit := func(ns, name string, change func(*v1.Widget)) {
		t.Helper()
		w := &v1.Widget{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, w); err != nil {
			t.Fatal(err)
		}
		change(w)
		if err := env.Client.Update(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	edit("team-b", "w-03", func(w *v1.Widget) { w.Spec.Image = "srv:2"; w.Spec.Endpoints = nil })
	edit("fleet", "w-04", func(w *v1.Widget) { w.Labels = nil })
	if err := env.Client.Delete(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "w-00"}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "w-00"}, Spec: v1.WidgetSpec{Image: "other:9"}}); err != nil {
		t.Fatal(err)
	}
	expect(cli.ExitError, "verify", "--against", dir)

	out = expect(cli.ExitDone, "restore", "--from", dir, "--dry-run")
	for _, want := range []string{"CREATED fleet/w-01", "CREATED fleet/w-05", "RESTORED team-b/w-03: spec.image", "RESTORED fleet/w-04: metadata.labels", "RESTORED team-b/w-00: spec.image",
		"would restore (dry run) from " + dir + " through v1: 2 created"} {
		if !strings.Contains(out, want) {
			t.Errorf("restore --dry-run lacks %q:\n%s", want, out)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: "w-01"}, &v1.Widget{}); err == nil {
		t.Error("restore --dry-run created fleet/w-01")
	}

	restore := func() *backup.RestoreReport {
		t.Helper()
		code, out, _ := run(t, env, "restore", "--from", dir, "-o", "json")
		r := &backup.RestoreReport{}
		if err := json.Unmarshal([]byte(out), r); code != cli.ExitDone || err != nil {
			t.Fatalf("restore -o json: exit %d, %v\n%s", code, err, out)
		}
		return r
	}
	if r := restore(); len(r.Created) != 2 || r.Unchanged != 24-5 || len(r.Failed) != 0 || !r.OK() || len(r.DroppedOwnerReferences) != 0 {
		t.Errorf("restore: %+v", r)
	}
	out = expect(cli.ExitDone, "verify", "--against", dir)
	if !strings.Contains(out, "ok: every object of the backup is there, unchanged") || !strings.Contains(out, "RECREATED fleet/w-01") || !strings.Contains(out, "RECREATED team-b/w-00") {
		t.Errorf("verify --against after the restore:\n%s", out)
	}
	w := &v1.Widget{}
	for name, owner := range map[string]string{"w-00": "kept-owner", "w-01": "gone-owner"} {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: name}, w); err != nil || len(w.OwnerReferences) != 1 || w.OwnerReferences[0].Name != owner {
			t.Errorf("fleet/%s, owned by %s: %+v %v", name, owner, w.OwnerReferences, err)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: "w-02"}, w); err != nil || len(w.Finalizers) != 1 || w.Finalizers[0] != "example.com/keep" {
		t.Errorf("the Widget with a foreign finalizer: %+v %v", w.Finalizers, err)
	}
	out = expect(cli.ExitDone, "restore", "--from", dir)
	if !strings.Contains(out, "0 created, 0 field(s) put back, 24 unchanged") {
		t.Errorf("a second restore: %s", out)
	}

	// An owner gone since the backup: its reference is dropped (written back, the garbage
	// collector would delete the restored Widget at once), and verify names exactly that.
	if err := env.Client.Delete(ctx, owners["gone-owner"]); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "w-01"}}); err != nil {
		t.Fatal(err)
	}
	if r := restore(); len(r.Created) != 1 || !r.OK() || len(r.DroppedOwnerReferences) != 1 ||
		!strings.HasPrefix(r.DroppedOwnerReferences[0], "fleet/w-01: owner reference to ConfigMap gone-owner") {
		t.Errorf("restore with an owner gone: %+v", r)
	}
	out = expect(cli.ExitError, "verify", "--against", dir)
	if strings.Contains(out, "MISSING") || strings.Count(out, "CHANGED") != 2 || !strings.Contains(out, "CHANGED v1 fleet/w-01: metadata.ownerReferences") ||
		!strings.Contains(out, "CHANGED v1alpha1 fleet/w-01: metadata.ownerReferences") {
		t.Errorf("verify --against after a restore without the owner:\n%s", out)
	}
	if out := expect(cli.ExitRefused, "restore", "--from", t.TempDir()); !strings.Contains(out, "not a backup") {
		t.Errorf("restore from an empty directory: %s", out)
	}
}

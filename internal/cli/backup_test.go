//go:build envtest

package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestBackupVerifyAndRoundTrip: a backup taken at add-version (before the storage flip)
// verifies clean after every later stage, remove included; an object changed by hand is
// reported with its field path (an empty list that became a missing one too); verify
// --round-trip passes on a healthy fleet and reports the objects a lossy conversion (a
// test-only fault of the webhook) would change.
func TestBackupVerifyAndRoundTrip(t *testing.T) {
	env, hook := widgetenv.StartAtStage(t, crd.StageAddVersion, testenv.Options{})
	ctx := context.Background()
	for _, ns := range []string{"widget-system", "fleet"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// Through both versions: v1-only fields (paused, a fractional timeout), empty and
	// missing endpoints.
	for i := range 40 {
		name := fmt.Sprintf("w-%02d", i)
		var obj client.Object
		if i%2 == 0 {
			spec := v1.WidgetSpec{Image: "srv:1", Size: ptr.To(int32(i % 3)), Paused: ptr.To(i%4 == 0), Timeout: ptr.To("1.5s")}
			if i%8 == 0 {
				spec.Endpoints = map[string]v1.EndpointSpec{}
			}
			obj = &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name}, Spec: spec}
		} else {
			spec := v1alpha1.WidgetSpec{Image: "srv:1", Replicas: ptr.To(int32(i % 3)), TimeoutSeconds: ptr.To(int32(i))}
			if i%3 == 0 {
				spec.Endpoints = []v1alpha1.Endpoint{}
			}
			obj = &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name}, Spec: spec}
		}
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	expect := expectExit(t, env)
	dir := filepath.Join(t.TempDir(), "before-the-flip")
	out := expect(cli.ExitDone, "backup", "--out", dir, "--records-namespace", "widget-system")
	if !strings.Contains(out, "map[v1:40 v1alpha1:40]") || !strings.Contains(out, "widget-system/widget-backup-widgets.widgetry.io") {
		t.Errorf("backup: %s", out)
	}
	if r, err := backup.LastRecord(ctx, env.Client, "widget-system", crd.WidgetName); err != nil || r == nil || r.Dir != dir {
		t.Errorf("the backup record: %+v %v", r, err)
	}
	if out := expect(cli.ExitRefused, "backup", "--out", dir); !strings.Contains(out, "is not empty") {
		t.Errorf("a second backup into the same directory: %s", out)
	}

	out = expect(cli.ExitDone, "verify", "--round-trip")
	if !strings.Contains(out, "ok: every object survives a write back through") || !strings.Contains(out, "v1alpha1   40 objects written back") {
		t.Errorf("round trip at add-version: %s", out)
	}

	for _, stage := range []crd.Stage{crd.StageFlipStorage, crd.StageMigrate, crd.StageUnserve, crd.StageRemove} {
		setStage(t, env, stage)
		if stage == crd.StageMigrate {
			migrateAll(t, env)
		}
		testenv.Eventually(t, 30*time.Second, "verify --against at "+string(stage), func() error {
			code, stdout, stderr := run(t, env, "verify", "--against", dir)
			if code != cli.ExitDone || !strings.Contains(stdout, "ok: every object of the backup is there, unchanged") {
				return fmt.Errorf("exit %d\n%s%s", code, stdout, stderr)
			}
			return nil
		})
		if stage == crd.StageFlipStorage {
			// Storage v1 now: reads and writes through v1alpha1 run the webhook both ways.
			out = expect(cli.ExitDone, "verify", "--round-trip")
			if !strings.Contains(out, "ok: every object survives a write back") {
				t.Errorf("round trip at flip-storage: %s", out)
			}
			hook.Lossy.Store(true)
			out = expect(cli.ExitError, "verify", "--round-trip")
			hook.Lossy.Store(false)
			// The Widgets written through v1 carry fields only v1 has (paused, a fractional
			// timeout), kept in the conversion-data annotation, which the fault drops; those
			// written through v1alpha1 have nothing to lose.
			if !strings.Contains(out, `LOSSY v1alpha1 fleet/w-00: metadata.annotations: {"widgetry.io/conversion-data":`) ||
				!strings.Contains(out, "LOSSY v1alpha1 fleet/w-04:") || strings.Contains(out, "fleet/w-01") || !strings.Contains(out, "the conversion loses data") {
				t.Errorf("round trip with the lossy fault:\n%s", out)
			}
		}
	}

	// A change by hand: an empty endpoints list removed, a port set elsewhere.
	w := &v1.Widget{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: "w-08"}, w); err != nil {
		t.Fatal(err)
	}
	w.Spec.Endpoints = nil
	if err := env.Client.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "w-02"}}); err != nil {
		t.Fatal(err)
	}
	out = expect(cli.ExitError, "verify", "--against", dir)
	for _, want := range []string{"CHANGED v1 fleet/w-08: spec.endpoints: {} != (absent)", "MISSING fleet/w-02", "1 object(s) missing and 1 field(s) changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify --against after changes by hand lacks %q:\n%s", want, out)
		}
	}
	if out := expect(cli.ExitRefused, "verify", "--against", t.TempDir()); !strings.Contains(out, "not a backup") {
		t.Errorf("verify --against an empty directory: %s", out)
	}
}

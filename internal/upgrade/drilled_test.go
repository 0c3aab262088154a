package upgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/widgetry/widget-operator/internal/backup"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
)

// TestRestoreDrilled: the backup-drilled check passes only for a backup taken after the flip
// whose own drill passed; every other state refuses, naming what to run, unless overridden
// with a reason, which is recorded as an event on the CRD.
func TestRestoreDrilled(t *testing.T) {
	ctx := context.Background()
	cfg := WidgetConfig()
	taken := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	record := func(storage string) backup.Record {
		return backup.Record{Manifest: backup.Manifest{CRD: crd.WidgetName, Time: taken, StorageVersion: storage, Objects: map[string]int{"v1": 3}}, Dir: "widgets-after-flip"}
	}
	cases := []struct {
		name   string
		record *backup.Record
		drill  *backup.DrillRecord
		want   string
	}{
		{name: "no backup", want: "no backup of widgets.widgetry.io is recorded in namespace widget-system, so none was drilled"},
		{name: "a backup from before the flip", record: ptr(record("v1alpha1")), want: "the recorded backup (2026-12-01T10:00:00Z) was taken with v1alpha1 as the storage version"},
		{name: "not drilled", record: ptr(record("v1")), want: "the recorded backup (2026-12-01T10:00:00Z, widgets-after-flip) has not been drilled: widgetctl restore --from widgets-after-flip --drill"},
		{name: "the drill of another backup", record: ptr(record("v1")), drill: &backup.DrillRecord{BackupTime: taken.Add(-time.Hour), OK: true, Objects: 3},
			want: "has not been drilled"},
		{name: "a failed drill", record: ptr(record("v1")), drill: &backup.DrillRecord{BackupTime: taken, Failed: 2, Objects: 3, Time: taken},
			want: "the drill of the recorded backup (widgets-after-flip) failed for 2 object(s)"},
		{name: "drilled", record: ptr(record("v1")), drill: &backup.DrillRecord{BackupTime: taken, OK: true, Objects: 3, Time: taken},
			want: "drilled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
			if tc.record != nil {
				if err := backup.SaveRecord(ctx, c, "widget-system", *tc.record); err != nil {
					t.Fatal(err)
				}
			}
			if tc.drill != nil {
				if err := backup.SaveDrill(ctx, c, "widget-system", crd.WidgetName, *tc.drill); err != nil {
					t.Fatal(err)
				}
			}
			live := crd.Widget()
			live.UID = "crd-uid"
			got, err := restoreDrilled(ctx, Clients{Client: c, RecordsNamespace: "widget-system"}, cfg, live, crd.StageUnserve)
			if tc.name == "drilled" {
				if err != nil || !strings.Contains(got, "objects restored and read back") {
					t.Errorf("a drilled backup: %q, %v", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refusal %v (note %q), want %q", err, got, tc.want)
			}
			if !strings.Contains(err.Error(), "widgetctl restore --from") && !strings.Contains(err.Error(), "runbooks/procedures/restore.md") {
				t.Errorf("the refusal names no command or runbook: %v", err)
			}
			got, err = restoreDrilled(ctx, Clients{Client: c, RecordsNamespace: "widget-system", AllowUndrilledReason: "INC-4: restore proven on staging"}, cfg, live, crd.StageUnserve)
			if err != nil || !strings.HasPrefix(got, `overridden ("INC-4: restore proven on staging"): `) || !strings.Contains(got, tc.want) {
				t.Errorf("overridden: %q, %v", got, err)
			}
			events := &corev1.EventList{}
			if err := c.List(ctx, events); err != nil || len(events.Items) != 1 || events.Items[0].Reason != "UndrilledBackupOverridden" ||
				!strings.Contains(events.Items[0].Message, "INC-4") || events.Items[0].InvolvedObject.UID != "crd-uid" {
				t.Errorf("the override's event: %+v, %v", events.Items, err)
			}
		})
	}
}

package upgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/widgetry/widget-operator/internal/backup"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
)

// TestRestoreDrilledNote: the backup-drilled check passes quietly only for a backup taken after
// the flip whose own drill passed; every other state is a warning that names what to run.
func TestRestoreDrilledNote(t *testing.T) {
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
		{name: "no backup", want: "WARNING: no backup of widgets.widgetry.io is recorded in namespace widget-system, so none was drilled"},
		{name: "a backup from before the flip", record: ptr(record("v1alpha1")), want: "WARNING: the recorded backup (2026-12-01T10:00:00Z) was taken with v1alpha1 as the storage version"},
		{name: "not drilled", record: ptr(record("v1")), want: "WARNING: the recorded backup (2026-12-01T10:00:00Z, widgets-after-flip) has not been drilled: widgetctl restore --from widgets-after-flip --drill"},
		{name: "the drill of another backup", record: ptr(record("v1")), drill: &backup.DrillRecord{BackupTime: taken.Add(-time.Hour), OK: true, Objects: 3},
			want: "has not been drilled"},
		{name: "a failed drill", record: ptr(record("v1")), drill: &backup.DrillRecord{BackupTime: taken, Failed: 2, Objects: 3, Time: taken},
			want: "WARNING: the drill of the recorded backup (widgets-after-flip) failed for 2 object(s)"},
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
			got := restoreDrilled(ctx, Clients{Client: c, RecordsNamespace: "widget-system"}, cfg)
			if !strings.Contains(got, tc.want) || (tc.name == "drilled") == strings.HasPrefix(got, "WARNING") {
				t.Errorf("note %q, want %q", got, tc.want)
			}
			if strings.HasPrefix(got, "WARNING") && !strings.Contains(got, "widgetctl restore --from") && !strings.Contains(got, "runbooks/procedures/restore.md") {
				t.Errorf("the warning names no command or runbook: %q", got)
			}
		})
	}
}

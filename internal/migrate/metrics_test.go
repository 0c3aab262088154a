package migrate

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/widgetry/widget-operator/internal/scheme"
)

// TestProgressCollector covers the phases the integration tests do not end in: a running
// (or killed) migration and a failed one, one series set per CRD, and objects without the
// label or in other namespaces ignored.
func TestProgressCollector(t *testing.T) {
	at := time.Unix(1796000000, 500000000)
	cm := func(ns, crd string, labelled bool, p Progress) *corev1.ConfigMap {
		p.CRD = crd
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ProgressObjectName(crd)}, Data: p.encode()}
		if labelled {
			c.Labels = map[string]string{ProgressLabel: "true"}
		}
		return c
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		cm("ops", "widgets.widgetry.io", true, Progress{Phase: PhaseRunning, LastProgressTime: at, Counts: Counts{Migrated: 7, Conflict: 2}}),
		cm("ops", "gadgets.example.com", true, Progress{Phase: PhaseFailed, LastProgressTime: at, Counts: Counts{Migrated: 1, NotFound: 1, Error: 3}}),
		cm("ops", "unlabelled.example.com", false, Progress{Phase: PhaseFailed}),
		cm("elsewhere", "other.example.com", true, Progress{Phase: PhaseFailed}),
	).Build()
	want := `
# HELP widget_migration_failed 1 if the last storage migration of the CRD ended in an error or a refusal to trim, else 0.
# TYPE widget_migration_failed gauge
widget_migration_failed{crd="gadgets.example.com"} 1
widget_migration_failed{crd="widgets.widgetry.io"} 0
# HELP widget_migration_in_progress 1 while a storage migration of the CRD is running or was interrupted and not resumed yet, else 0.
# TYPE widget_migration_in_progress gauge
widget_migration_in_progress{crd="gadgets.example.com"} 0
widget_migration_in_progress{crd="widgets.widgetry.io"} 1
# HELP widget_migration_last_progress_timestamp_seconds Unix time at which the storage migration of the CRD last completed objects.
# TYPE widget_migration_last_progress_timestamp_seconds gauge
widget_migration_last_progress_timestamp_seconds{crd="gadgets.example.com"} 1.7960000005e+09
widget_migration_last_progress_timestamp_seconds{crd="widgets.widgetry.io"} 1.7960000005e+09
# HELP widget_migration_objects_total Objects handled by the current or last storage migration of a CRD, by result (migrated, conflict, not_found, error). Resets when a new migration starts.
# TYPE widget_migration_objects_total counter
widget_migration_objects_total{crd="gadgets.example.com",result="conflict"} 0
widget_migration_objects_total{crd="gadgets.example.com",result="error"} 3
widget_migration_objects_total{crd="gadgets.example.com",result="migrated"} 1
widget_migration_objects_total{crd="gadgets.example.com",result="not_found"} 1
widget_migration_objects_total{crd="widgets.widgetry.io",result="conflict"} 2
widget_migration_objects_total{crd="widgets.widgetry.io",result="error"} 0
widget_migration_objects_total{crd="widgets.widgetry.io",result="migrated"} 7
widget_migration_objects_total{crd="widgets.widgetry.io",result="not_found"} 0
`
	if err := testutil.CollectAndCompare(NewProgressCollector(c, "ops"), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(newRegistry(t, NewProgressCollector(c, "ops"))); err != nil || n != 14 {
		t.Errorf("registered collector: %d series, %v", n, err)
	}
}

// newRegistry registers collector as the manager will, which also checks its descriptors.
func newRegistry(t *testing.T, collector *ProgressCollector) *prometheus.Registry {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	if err := r.Register(collector); err != nil {
		t.Fatal(err)
	}
	return r
}

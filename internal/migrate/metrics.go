package migrate

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Metric names: a contract with the alerts and dashboards (internal/monitoring) and the metric
// catalogue in runbooks/README.md; like every metric of the operator they start with widget_.
const (
	MetricObjectsTotal          = "widget_migration_objects_total"
	MetricInProgress            = "widget_migration_in_progress"
	MetricFailed                = "widget_migration_failed"
	MetricLastProgressTimestamp = "widget_migration_last_progress_timestamp_seconds"
)

// Values of the result label of MetricObjectsTotal.
const (
	ResultMigrated = "migrated"
	ResultConflict = "conflict"
	ResultNotFound = "not_found"
	ResultError    = "error"
)

var (
	objectsDesc = prometheus.NewDesc(MetricObjectsTotal,
		"Objects handled by the current or last storage migration of a CRD, by result (migrated, conflict, not_found, error). Resets when a new migration starts.",
		[]string{"crd", "result"}, nil)
	inProgressDesc = prometheus.NewDesc(MetricInProgress,
		"1 while a storage migration of the CRD is running or was interrupted and not resumed yet, else 0.",
		[]string{"crd"}, nil)
	failedDesc = prometheus.NewDesc(MetricFailed,
		"1 if the last storage migration of the CRD ended in an error or a refusal to trim, else 0.",
		[]string{"crd"}, nil)
	lastProgressDesc = prometheus.NewDesc(MetricLastProgressTimestamp,
		"Unix time at which the storage migration of the CRD last completed objects.",
		[]string{"crd"}, nil)
)

// collectTimeout bounds the read of the progress objects during a scrape.
const collectTimeout = 5 * time.Second

// ProgressCollector exports widget_migration_* from the progress ConfigMaps of one namespace
// at scrape time. The migration itself usually runs in a short-lived widgetctl (a Helm hook
// Job, or on-call's terminal) that Prometheus never scrapes; the manager, which is scraped,
// registers this collector and so reports every migration, including one that was killed.
type ProgressCollector struct {
	reader    client.Reader
	namespace string
	log       logr.Logger
}

// NewProgressCollector returns a collector reading progress ConfigMaps (label
// ProgressLabel=true) in namespace through reader. The manager should pass
// mgr.GetAPIReader(): one small LIST per scrape, needing only `list configmaps` in its own
// namespace, whereas its cached client would start a ConfigMap informer (cluster-wide unless
// the cache is restricted) just for this.
func NewProgressCollector(reader client.Reader, namespace string) *ProgressCollector {
	return &ProgressCollector{reader: reader, namespace: namespace, log: logr.Discard()}
}

// WithLogger sets where read errors go; a failed read exports nothing rather than failing
// the whole scrape of the manager.
func (pc *ProgressCollector) WithLogger(l logr.Logger) *ProgressCollector {
	pc.log = l
	return pc
}

// Describe implements prometheus.Collector.
func (pc *ProgressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- objectsDesc
	ch <- inProgressDesc
	ch <- failedDesc
	ch <- lastProgressDesc
}

// Collect implements prometheus.Collector.
func (pc *ProgressCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	list := &corev1.ConfigMapList{}
	if err := pc.reader.List(ctx, list, client.InNamespace(pc.namespace), client.MatchingLabels{ProgressLabel: "true"}); err != nil {
		pc.log.Error(err, "could not read the migration progress ConfigMaps; widget_migration_* not exported in this scrape", "namespace", pc.namespace)
		return
	}
	for i := range list.Items {
		p := DecodeProgress(&list.Items[i])
		if p.CRD == "" {
			continue
		}
		for result, n := range map[string]int64{ResultMigrated: p.Counts.Migrated, ResultConflict: p.Counts.Conflict,
			ResultNotFound: p.Counts.NotFound, ResultError: p.Counts.Error} {
			ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.CounterValue, float64(n), p.CRD, result)
		}
		ch <- prometheus.MustNewConstMetric(inProgressDesc, prometheus.GaugeValue, boolValue(p.Phase == PhaseRunning), p.CRD)
		ch <- prometheus.MustNewConstMetric(failedDesc, prometheus.GaugeValue, boolValue(p.Phase == PhaseFailed), p.CRD)
		if !p.LastProgressTime.IsZero() {
			ch <- prometheus.MustNewConstMetric(lastProgressDesc, prometheus.GaugeValue, float64(p.LastProgressTime.UnixNano())/1e9, p.CRD)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

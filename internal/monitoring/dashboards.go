package monitoring

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	"github.com/grafana/grafana-foundation-sdk/go/units"
)

// Grafana variables every dashboard has; queries on the manager's metrics select with mgr.
const (
	varDatasource = "datasource"
	varJob        = "job"
	varNamespace  = "namespace"
	mgr           = `job="$job",namespace=~"$namespace"`
	// rateWindow is Grafana's $__rate_interval; tests substitute it before parsing.
	rateWindow = "$__rate_interval"
)

// Colours of threshold steps.
const (
	green  = "green"
	yellow = "yellow"
	red    = "red"
	blue   = "blue"
)

type panelKind int

const (
	kindTimeseries panelKind = iota
	kindStat
	kindTable
)

// query is one PromQL target of a panel.
type query struct {
	expr, legend string
	instant      bool // instant query (stat, table) instead of a range
	table        bool // format as table (one row per series)
}

// step is a threshold step: from value (nil: the base step) on, color.
type step struct {
	from  *float64
	color string
}

func base(color string) step          { return step{color: color} }
func at(v float64, color string) step { return step{from: &v, color: color} }

// panel is the data of one panel; build turns it into an SDK builder.
type panel struct {
	kind        panelKind
	title, desc string
	unit        string
	min         *float64
	steps       []step
	mappings    map[string]string // value → text (stat, table)
	queries     []query
	w, h        uint32
}

func zero() *float64 { v := 0.0; return &v }

// dashboardSpec is one dashboard: file name (without .json), uid, title and rows of panels.
type dashboardSpec struct {
	file, uid, title, desc string
	rows                   []row
}

type row struct {
	title  string
	panels []panel
}

// specs lists the dashboards, in the order of their files.
func specs() []dashboardSpec {
	return []dashboardSpec{overview(), webhooks(), apiUpgrade(), certificates()}
}

func overview() dashboardSpec {
	return dashboardSpec{
		file: "widget-operator-overview", uid: "widget-operator-overview", title: "widget-operator / Overview",
		desc: "Manager replicas, leadership, Widget reconciliation and its work queue. Alerts: WidgetOperatorDegraded, WidgetOperatorNoLeader, WidgetReconcileErrors.",
		rows: []row{{
			title: "Replicas",
			panels: []panel{{
				kind: kindStat, title: "Replicas up", unit: units.Short, w: 6, h: 4,
				desc:    "Manager replicas Prometheus scrapes successfully (up == 1). Below the desired count (chart replicaCount, default 2) for 15 minutes fires WidgetOperatorDegraded; 0 means no webhook: WidgetWebhookDown.",
				steps:   []step{base(red), at(1, yellow), at(2, green)},
				queries: []query{{expr: `count(up{` + mgr + `} == 1) or vector(0)`, legend: "up", instant: true}},
			}, {
				kind: kindStat, title: "Leaders", unit: units.Short, w: 6, h: 4,
				desc:     "Replicas holding the widget-operator.widgetry.io lease. Exactly 1 is healthy; 0 or more than 1 for 5 minutes fires WidgetOperatorNoLeader.",
				steps:    []step{base(red), at(1, green), at(2, red)},
				mappings: map[string]string{"0": "no leader"},
				queries:  []query{{expr: `sum(leader_election_master_status{` + mgr + `,name="` + LeaseName + `"}) or vector(0)`, legend: "leaders", instant: true}},
			}, {
				kind: kindTable, title: "Builds running", unit: units.Short, w: 12, h: 4,
				desc:    "Replicas per build version and Go version (widget_build_info). More than one row outside a rollout means replicas run different code.",
				steps:   []step{base(green)},
				queries: []query{{expr: `count by (version, go_version) (widget_build_info{` + mgr + `})`, instant: true, table: true}},
			}},
		}, {
			title: "Reconciliation",
			panels: []panel{{
				kind: kindTimeseries, title: "Reconcile rate by result", unit: units.OpsPerSecond, min: zero(), w: 8, h: 8,
				desc:    "Reconciles of the widget controller per second, by result (success, error, requeue, requeue_after).",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (result) (rate(controller_runtime_reconcile_total{` + mgr + `,controller="widget"}[` + rateWindow + `]))`, legend: "{{result}}"}},
			}, {
				kind: kindTimeseries, title: "Reconcile error ratio", unit: units.PercentUnit, min: zero(), w: 8, h: 8,
				desc:    "Share of reconciles ending in an error. Above 10% for 15 minutes fires WidgetReconcileErrors.",
				steps:   []step{base(green), at(0.1, red)},
				queries: []query{{expr: `(sum(rate(controller_runtime_reconcile_errors_total{` + mgr + `,controller="widget"}[` + rateWindow + `])) or vector(0)) / sum(rate(controller_runtime_reconcile_total{` + mgr + `,controller="widget"}[` + rateWindow + `]))`, legend: "errors"}},
			}, {
				kind: kindTimeseries, title: "Reconcile duration", unit: units.Seconds, min: zero(), w: 8, h: 8,
				desc:  "50th and 99th percentile time of one reconcile of a Widget. A Widget reconcile writes a Deployment, a Service and a catalog ConfigMap; seconds mean a slow apiserver.",
				steps: []step{base(green), at(1, yellow), at(5, red)},
				queries: []query{
					{expr: `histogram_quantile(0.5, sum by (le) (rate(controller_runtime_reconcile_time_seconds_bucket{` + mgr + `,controller="widget"}[` + rateWindow + `])))`, legend: "p50"},
					{expr: `histogram_quantile(0.99, sum by (le) (rate(controller_runtime_reconcile_time_seconds_bucket{` + mgr + `,controller="widget"}[` + rateWindow + `])))`, legend: "p99"},
				},
			}},
		}, {
			title: "Work queue",
			panels: []panel{{
				kind: kindTimeseries, title: "Work queue depth", unit: units.Short, min: zero(), w: 12, h: 8,
				desc:    "Widgets waiting to be reconciled, per replica (only the leader's queue fills). A depth that keeps growing means reconciles cannot keep up.",
				steps:   []step{base(green), at(100, yellow), at(1000, red)},
				queries: []query{{expr: `sum by (instance) (workqueue_depth{` + mgr + `,name="widget"})`, legend: "{{instance}}"}},
			}, {
				kind: kindTimeseries, title: "Work queue wait", unit: units.Seconds, min: zero(), w: 12, h: 8,
				desc:  "99th percentile time a Widget waits in the queue before a worker picks it up.",
				steps: []step{base(green), at(1, yellow), at(10, red)},
				queries: []query{
					{expr: `histogram_quantile(0.99, sum by (le) (rate(workqueue_queue_duration_seconds_bucket{` + mgr + `,name="widget"}[` + rateWindow + `])))`, legend: "p99"},
				},
			}},
		}},
	}
}

func webhooks() dashboardSpec {
	const admission = `webhook=~"/mutate-widgetry-io-widget|/validate-widgetry-io-widget"`
	const crd = `crd_name="` + WidgetCRD + `"`
	return dashboardSpec{
		file: "widget-operator-webhooks", uid: "widget-operator-webhooks", title: "widget-operator / Webhooks",
		desc: "Admission and conversion webhooks from the manager's side and conversion from the apiserver's side. Alerts: WidgetConversionWebhookErrors, WidgetConversionWebhookSlow, WidgetWebhookDown.",
		rows: []row{{
			title: "Traffic",
			panels: []panel{{
				kind: kindTimeseries, title: "Conversion requests by version pair", unit: units.RequestsPerSecond, min: zero(), w: 8, h: 8,
				desc:    "ConversionReview requests per second answered by the manager, by source version, desired version and result (success, failure: refused, error: malformed).",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (from_version, to_version, result) (rate(widget_conversion_requests_total{` + mgr + `}[` + rateWindow + `]))`, legend: "{{from_version}} → {{to_version}} {{result}}"}},
			}, {
				kind: kindTimeseries, title: "Objects converted", unit: units.OpsPerSecond, min: zero(), w: 8, h: 8,
				desc:    "Widgets converted per second (a LIST converts many objects in one request).",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (from_version, to_version) (rate(widget_conversion_objects_total{` + mgr + `}[` + rateWindow + `]))`, legend: "{{from_version}} → {{to_version}}"}},
			}, {
				kind: kindTimeseries, title: "Admission requests by webhook and code", unit: units.RequestsPerSecond, min: zero(), w: 8, h: 8,
				desc:    "Defaulting and validating webhook requests per second, by path and HTTP code (controller-runtime's webhook metrics).",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (webhook, code) (rate(controller_runtime_webhook_requests_total{` + mgr + `,` + admission + `}[` + rateWindow + `]))`, legend: "{{webhook}} {{code}}"}},
			}},
		}, {
			title: "Errors",
			panels: []panel{{
				kind: kindTimeseries, title: "Error ratio", unit: units.PercentUnit, min: zero(), w: 12, h: 8,
				desc:  "Share of requests that did not succeed: conversion at the manager, conversion at the apiserver (includes TLS and connection failures that never reach the manager) and admission (non-2xx). Above 5% for 10 minutes fires WidgetConversionWebhookErrors.",
				steps: []step{base(green), at(0.05, red)},
				queries: []query{
					{expr: `(sum(rate(widget_conversion_requests_total{` + mgr + `,result!="success"}[` + rateWindow + `])) or vector(0)) / sum(rate(widget_conversion_requests_total{` + mgr + `}[` + rateWindow + `]))`, legend: "conversion (manager)"},
					{expr: `(sum(rate(apiserver_crd_conversion_webhook_duration_seconds_count{` + crd + `,succeeded="false"}[` + rateWindow + `])) or vector(0)) / sum(rate(apiserver_crd_conversion_webhook_duration_seconds_count{` + crd + `}[` + rateWindow + `]))`, legend: "conversion (apiserver)"},
					{expr: `(sum(rate(controller_runtime_webhook_requests_total{` + mgr + `,` + admission + `,code!~"2.."}[` + rateWindow + `])) or vector(0)) / sum(rate(controller_runtime_webhook_requests_total{` + mgr + `,` + admission + `}[` + rateWindow + `]))`, legend: "admission"},
				},
			}, {
				kind: kindTimeseries, title: "Conversion failures by reason", unit: units.RequestsPerSecond, min: zero(), w: 12, h: 8,
				desc:    "Failed ConversionReview requests per second by reason (MalformedRequest, UnsupportedVersion, InvalidConversionData, ConversionFailed, …). ConversionFailed usually names one object in the manager's log.",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (reason) (rate(widget_conversion_failures_total{` + mgr + `}[` + rateWindow + `]))`, legend: "{{reason}}"}},
			}},
		}, {
			title: "Latency",
			panels: []panel{{
				kind: kindTimeseries, title: "Conversion latency per version pair (manager)", unit: units.Seconds, min: zero(), w: 8, h: 8,
				desc:  "50th and 99th percentile time the manager takes to answer one ConversionReview, by version pair. p99 above 250ms for 15 minutes fires WidgetConversionWebhookSlow.",
				steps: []step{base(green), at(0.25, red)},
				queries: []query{
					{expr: `histogram_quantile(0.5, sum by (le, from_version, to_version) (rate(widget_conversion_duration_seconds_bucket{` + mgr + `}[` + rateWindow + `])))`, legend: "p50 {{from_version}} → {{to_version}}"},
					{expr: `histogram_quantile(0.99, sum by (le, from_version, to_version) (rate(widget_conversion_duration_seconds_bucket{` + mgr + `}[` + rateWindow + `])))`, legend: "p99 {{from_version}} → {{to_version}}"},
				},
			}, {
				kind: kindTimeseries, title: "Conversion latency seen by the apiserver", unit: units.Seconds, min: zero(), w: 8, h: 8,
				desc:  "99th percentile of the apiserver's conversion calls for widgets.widgetry.io, including network and TLS. Every read or write through a non-storage version waits this long. Above 1s for 15 minutes fires WidgetConversionWebhookSlow.",
				steps: []step{base(green), at(1, red)},
				queries: []query{
					{expr: `histogram_quantile(0.99, sum by (le, from_version, to_version) (rate(apiserver_crd_conversion_webhook_duration_seconds_bucket{` + crd + `}[` + rateWindow + `])))`, legend: "p99 {{from_version}} → {{to_version}}"},
				},
			}, {
				kind: kindTimeseries, title: "Webhook latency by path", unit: units.Seconds, min: zero(), w: 8, h: 8,
				desc:  "99th percentile handling time per webhook path (controller-runtime's webhook server: /convert and the admission paths).",
				steps: []step{base(green), at(0.5, yellow), at(2, red)},
				queries: []query{
					{expr: `histogram_quantile(0.99, sum by (le, webhook) (rate(controller_runtime_webhook_latency_seconds_bucket{` + mgr + `}[` + rateWindow + `])))`, legend: "p99 {{webhook}}"},
				},
			}},
		}},
	}
}

// stageExpr derives the stage number (1 initial to 6 remove, the order of crd.Stages) from
// the CRD metrics, following the stage table in internal/crd's package documentation: the
// first branch of the `or` chain that has a value wins (all have the empty label set).
// 0: CRD not reported.
const stageExpr = `(max(widget_crd_version_info{` + mgr + `,crd="` + WidgetCRD + `",version="v1",storage="true"}) * 6 unless max(widget_crd_version_info{` + mgr + `,crd="` + WidgetCRD + `",version="v1alpha1"}))
or
max(widget_crd_version_info{` + mgr + `,crd="` + WidgetCRD + `",version="v1alpha1",served="false"}) * 5
or
(max(widget_crd_version_info{` + mgr + `,crd="` + WidgetCRD + `",version="v1",storage="true"}) * 4 unless count(max by (version) (widget_crd_stored_versions{` + mgr + `,crd="` + WidgetCRD + `"})) > 1)
or
max(widget_crd_version_info{` + mgr + `,crd="` + WidgetCRD + `",version="v1",storage="true"}) * 3
or
max(widget_crd_version_info{` + mgr + `,crd="` + WidgetCRD + `",version="v1",served="true"}) * 2
or
max(widget_crd_version_info{` + mgr + `,crd="` + WidgetCRD + `",version="v1alpha1"}) * 1
or
vector(0)`

func apiUpgrade() dashboardSpec {
	const deprecated = `group="widgetry.io",version="v1alpha1",resource="widgets"`
	return dashboardSpec{
		file: "widget-operator-api-upgrade", uid: "widget-operator-api-upgrade", title: "widget-operator / API upgrade",
		desc: "The staged move of widgets.widgetry.io from v1alpha1 to v1: stage, served and storage flags, storedVersions, storage migration and remaining v1alpha1 clients. Runbooks: runbooks/upgrade/<stage>.md. Alerts: WidgetStorageMigrationFailed, WidgetStorageMigrationStalled, WidgetStoredVersionsNotTrimmed, WidgetDeprecatedVersionInUse.",
		rows: []row{{
			title: "Stage and versions",
			panels: []panel{{
				kind: kindStat, title: "Stage", unit: units.Short, w: 6, h: 6,
				desc:     "Stage of widgets.widgetry.io derived from the served/storage flags and storedVersions; each stage's flags are at the top of its runbook, runbooks/upgrade/<stage>.md. flip-storage and migrate have the same flags and differ in storedVersions (migrate: only v1). add-version also covers a rollback from flip-storage that left v1 stored. `widgetctl upgrade status` is the authority.",
				steps:    []step{base(blue)},
				mappings: map[string]string{"0": "no CRD", "1": "initial", "2": "add-version", "3": "flip-storage", "4": "migrate", "5": "unserve", "6": "remove"},
				queries:  []query{{expr: stageExpr, legend: "stage", instant: true}},
			}, {
				kind: kindTable, title: "Versions: served and storage", unit: units.Short, w: 10, h: 6,
				desc:    "One row per version in spec.versions with its served and storage flags (widget_crd_version_info).",
				steps:   []step{base(green)},
				queries: []query{{expr: `max by (crd, version, served, storage) (widget_crd_version_info{` + mgr + `})`, instant: true, table: true}},
			}, {
				kind: kindTable, title: "storedVersions", unit: units.Short, w: 8, h: 6,
				desc:    "Versions listed in status.storedVersions: objects may still be stored in each. Must be only the storage version before unserve; more than one for a day with no migration running fires WidgetStoredVersionsNotTrimmed.",
				steps:   []step{base(green)},
				queries: []query{{expr: `max by (crd, version) (widget_crd_stored_versions{` + mgr + `})`, instant: true, table: true}},
			}},
		}, {
			title: "Storage migration",
			panels: []panel{{
				kind: kindStat, title: "Migration state", unit: units.Short, w: 6, h: 6,
				desc:     "Whether a storage migration runs now (widget_migration_in_progress) and whether the last run failed (widget_migration_failed fires WidgetStorageMigrationFailed).",
				steps:    []step{base(green), at(1, yellow)},
				mappings: map[string]string{"0": "idle"},
				queries: []query{
					{expr: `max by (crd) (widget_migration_in_progress{` + mgr + `})`, legend: "running {{crd}}", instant: true},
					{expr: `max by (crd) (widget_migration_failed{` + mgr + `})`, legend: "failed {{crd}}", instant: true},
				},
			}, {
				kind: kindStat, title: "Since last progress", unit: units.Seconds, w: 6, h: 6,
				desc:    "Time since the running migration last rewrote an object. Over 15 minutes while in progress fires WidgetStorageMigrationStalled.",
				steps:   []step{base(green), at(300, yellow), at(900, red)},
				queries: []query{{expr: `time() - max by (crd) (widget_migration_last_progress_timestamp_seconds{` + mgr + `})`, legend: "{{crd}}", instant: true}},
			}, {
				kind: kindTimeseries, title: "Objects processed by result", unit: units.Short, min: zero(), w: 6, h: 6,
				desc:    "Objects the migration has handled, by result: migrated, conflict (someone else wrote it: already re-encoded), not_found (deleted meanwhile), error.",
				steps:   []step{base(green)},
				queries: []query{{expr: `max by (crd, result) (widget_migration_objects_total{` + mgr + `})`, legend: "{{crd}} {{result}}"}},
			}, {
				kind: kindTimeseries, title: "Migration rate and errors", unit: units.OpsPerSecond, min: zero(), w: 6, h: 6,
				desc:  "Objects per second by result. A nonzero error rate ends in WidgetStorageMigrationFailed; the widgetctl migrate summary names the objects.",
				steps: []step{base(green)},
				queries: []query{
					{expr: `sum by (crd, result) (rate(widget_migration_objects_total{` + mgr + `}[` + rateWindow + `]))`, legend: "{{crd}} {{result}}"},
				},
			}},
		}, {
			title: "Clients",
			panels: []panel{{
				kind: kindTimeseries, title: "Requests by API version", unit: units.RequestsPerSecond, min: zero(), w: 12, h: 8,
				desc:    "Requests for widgets per second by API version, from the apiserver's metrics. v1alpha1 traffic after flip-storage comes from other clients and breaks at unserve.",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (version) (rate(apiserver_request_total{group="widgetry.io",resource="widgets"}[` + rateWindow + `]))`, legend: "{{version}}"}},
			}, {
				kind: kindTimeseries, title: "Deprecated v1alpha1 requests", unit: units.RequestsPerSecond, min: zero(), w: 12, h: 8,
				desc:  "Requests for widgets.widgetry.io/v1alpha1 by verb; the apiserver marks the version requested as deprecated (apiserver_requested_deprecated_apis = 1 since its start). Continuing traffic after flip-storage fires WidgetDeprecatedVersionInUse.",
				steps: []step{base(green), at(0.001, yellow)},
				queries: []query{
					{expr: `sum by (verb) (rate(apiserver_request_total{` + deprecated + `}[` + rateWindow + `]))`, legend: "{{verb}}"},
					{expr: `max(apiserver_requested_deprecated_apis{` + deprecated + `})`, legend: "marked deprecated"},
				},
			}},
		}},
	}
}

func certificates() dashboardSpec {
	const expiry = `widget_webhook_certificate_expiry_timestamp_seconds{` + mgr + `}`
	thresholds := []step{base(red), at(86400, yellow), at(7*86400, green)}
	return dashboardSpec{
		file: "widget-operator-certificates", uid: "widget-operator-certificates", title: "widget-operator / Certificates",
		desc: "The webhook serving certificate each replica has loaded. Alerts: WidgetWebhookCertificateExpiresSoon, WidgetWebhookDown. Procedure: runbooks/procedures/certificate-rotation.md.",
		rows: []row{{
			title: "Serving certificate",
			panels: []panel{{
				kind: kindStat, title: "Soonest expiry", unit: units.Seconds, w: 8, h: 5,
				desc:    "Time until the first loaded serving certificate expires. Under 7 days fires WidgetWebhookCertificateExpiresSoon (warning), under 1 day critical.",
				steps:   thresholds,
				queries: []query{{expr: `min(` + expiry + `) - time()`, legend: "expires in", instant: true}},
			}, {
				kind: kindStat, title: "Replicas without a certificate", unit: units.Short, w: 8, h: 5,
				desc:    "Replicas that are up but report no loaded serving certificate: they are not ready and get no webhook traffic.",
				steps:   []step{base(green), at(1, red)},
				queries: []query{{expr: `count(up{` + mgr + `} == 1) - count(` + expiry + `) or count(up{` + mgr + `} == 1) or vector(0)`, legend: "without", instant: true}},
			}, {
				kind: kindTable, title: "Expiry per replica", unit: "dateTimeAsIso", w: 8, h: 5,
				desc:    "NotAfter of the certificate each replica serves. Replicas differing after a rotation have not reloaded (certwatcher polls the mounted Secret).",
				steps:   []step{base(green)},
				queries: []query{{expr: expiry + ` * 1000`, instant: true, table: true}},
			}, {
				kind: kindTimeseries, title: "Time to expiry per replica", unit: units.Seconds, w: 24, h: 8,
				desc:    "Time until each replica's serving certificate expires. A sawtooth is healthy: cert-manager renews, the replica reloads, the line jumps up.",
				steps:   thresholds,
				queries: []query{{expr: expiry + ` - time()`, legend: "{{instance}}"}},
			}},
		}},
	}
}

func thresholdsOf(steps []step) *dashboard.ThresholdsConfigBuilder {
	var ts []dashboard.Threshold
	for _, s := range steps {
		ts = append(ts, dashboard.Threshold{Value: s.from, Color: s.color})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(ts)
}

func mappingsOf(m map[string]string) []dashboard.ValueMapping {
	if len(m) == 0 {
		return nil
	}
	options := map[string]dashboard.ValueMappingResult{}
	for v, text := range m {
		options[v] = dashboard.ValueMappingResult{Text: cog.ToPtr(text)}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: options}}}
}

func targetsOf(p panel) []cog.Builder[variants.Dataquery] {
	var ts []cog.Builder[variants.Dataquery]
	for i, q := range p.queries {
		b := prometheus.NewDataqueryBuilder().Expr(q.expr).RefId(string(rune('A' + i)))
		if q.legend != "" {
			b = b.LegendFormat(q.legend)
		}
		if q.instant {
			b = b.Instant()
		} else {
			b = b.Range()
		}
		if q.table {
			b = b.Format(prometheus.PromQueryFormatTable)
		}
		ts = append(ts, b)
	}
	return ts
}

func (p panel) builder() cog.Builder[dashboard.Panel] {
	switch p.kind {
	case kindStat:
		b := stat.NewPanelBuilder().Title(p.title).Description(p.desc).Unit(p.unit).
			Thresholds(thresholdsOf(p.steps)).Mappings(mappingsOf(p.mappings)).
			Targets(targetsOf(p)).Height(p.h).Span(p.w).
			ColorMode(common.BigValueColorModeBackground).GraphMode(common.BigValueGraphModeNone).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
		return b
	case kindTable:
		return table.NewPanelBuilder().Title(p.title).Description(p.desc).Unit(p.unit).
			Thresholds(thresholdsOf(p.steps)).Mappings(mappingsOf(p.mappings)).
			Targets(targetsOf(p)).Height(p.h).Span(p.w).
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"}))
	default:
		b := timeseries.NewPanelBuilder().Title(p.title).Description(p.desc).Unit(p.unit).
			Thresholds(thresholdsOf(p.steps)).Targets(targetsOf(p)).Height(p.h).Span(p.w).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed)).
			Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementBottom).Calcs([]string{"lastNotNull", "max"}))
		if p.min != nil {
			b = b.Min(*p.min)
		}
		return b
	}
}

func (d dashboardSpec) build() (dashboard.Dashboard, error) {
	ds := common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + varDatasource + "}")}
	b := dashboard.NewDashboardBuilder(d.title).
		Uid(d.uid).
		Description(d.desc).
		Tags([]string{"widget-operator", "generated"}).
		Editable().
		Refresh("30s").
		Time("now-3h", "now").
		Timezone(common.TimeZoneUtc).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("widget-operator").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"widget-operator"}).AsDropdown(true).IncludeVars(true).KeepTime(true)).
		WithVariable(dashboard.NewDatasourceVariableBuilder(varDatasource).Label("Data source").Type("prometheus").
			Description("Prometheus that scrapes the manager (and the apiserver, for the apiserver panels).")).
		WithVariable(dashboard.NewQueryVariableBuilder(varJob).Label("Job").Datasource(ds).
			Description("Prometheus job label of the manager's metrics endpoint.").
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(widget_build_info, job)")}).
			Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(DefaultJob)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(DefaultJob)}}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)).
		WithVariable(dashboard.NewQueryVariableBuilder(varNamespace).Label("Namespace").Datasource(ds).
			Description("Namespace of the manager; All also matches targets without a namespace label.").
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(widget_build_info{job="$job"}, namespace)`)}).
			IncludeAll(true).AllValue(".*").
			Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc))
	// Grafana keys panel links, edits and repeats on ids: unique, from 1, rows included.
	id := uint32(0)
	for _, r := range d.rows {
		id++
		b = b.WithRow(dashboard.NewRowBuilder(r.title).Id(id))
		for _, p := range r.panels {
			id++
			b = b.WithPanel(finish(p.builder(), ds, id))
		}
	}
	return b.Build()
}

// finish sets a panel's id and its datasource to the templated one.
func finish(b cog.Builder[dashboard.Panel], ds common.DataSourceRef, id uint32) cog.Builder[dashboard.Panel] {
	switch pb := b.(type) {
	case *stat.PanelBuilder:
		return pb.Datasource(ds).Id(id)
	case *table.PanelBuilder:
		return pb.Datasource(ds).Id(id)
	case *timeseries.PanelBuilder:
		return pb.Datasource(ds).Id(id)
	}
	panic(fmt.Sprintf("unexpected panel builder %T", b))
}

// Dashboards returns the JSON of every dashboard by file name (dashboards/<name>.json).
func Dashboards() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, d := range specs() {
		built, err := d.build()
		if err != nil {
			return nil, fmt.Errorf("build dashboard %s: %w", d.file, err)
		}
		j, err := json.MarshalIndent(built, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode dashboard %s: %w", d.file, err)
		}
		out[d.file+".json"] = append(j, '\n')
	}
	return out, nil
}

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

// Grafana variables every dashboard has; every query selects with cl (the cluster), queries on
// the manager's metrics with mgr.
const (
	varDatasource = "datasource"
	varCluster    = "cluster"
	varJob        = "job"
	varNamespace  = "namespace"
	// cl selects the cluster: All is ".*", which also matches series without a cluster label,
	// so single-cluster setups need none.
	cl  = `cluster=~"$cluster"`
	mgr = cl + `,job="$job",namespace=~"$namespace"`
	// cadvisor selects the kubelet's cAdvisor series of the planes' containers; the pods
	// themselves are the job's scrape targets (onManagerPods).
	cadvisor = cl + `,namespace=~"$namespace",container=~"` + ManagerContainers + `"`
	// onManagerPods keeps the series of pods that the manager's job scrapes: cAdvisor knows
	// containers, not the release.
	onManagerPods = ` and on (cluster, namespace, pod) up{` + mgr + `}`
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
	textName    bool              // stat: show the series' name (its legend), not the value
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

// specs lists the dashboards, in the order of their files, for cfg: the job variable's default,
// the expected replicas of the replica thresholds and the Certificate cert-manager reports.
func specs(cfg Config) []dashboardSpec {
	return []dashboardSpec{overview(cfg), webhooks(), apiUpgrade(), certificates(cfg)}
}

// replicaSteps colour a count of replicas: none red, fewer than expected yellow, all green.
func replicaSteps(expected int) []step {
	return []step{base(red), at(1, yellow), at(float64(expected), green)}
}

func overview(cfg Config) dashboardSpec {
	const crSelector = mgr + `,controller="widget"`
	const wq = mgr + `,name="widget"`
	// The manager's own process has no process label (its container is named manager); the
	// controller's series, re-exported by it, carry process="controller".
	processOrManager := func(expr string) string {
		return `label_replace(` + expr + `, "process", "manager", "process", "")`
	}
	clientErrors := `sum by (process) (rate(rest_client_requests_total{` + mgr + `,code=~"5..|429|<error>"}[` + rateWindow + `]))`
	clientAll := `sum by (process) (rate(rest_client_requests_total{` + mgr + `}[` + rateWindow + `]))`
	return dashboardSpec{
		file: "widget-operator-overview", uid: "widget-operator-overview", title: "widget-operator / Overview",
		desc: "Manager replicas, leadership, Widget reconciliation and its work queue, panics, the manager's API requests and its pods' CPU, memory and restarts. Alerts: WidgetOperatorDegraded, WidgetWebhookReplicasNotSpread, WidgetOperatorNoLeader, WidgetReconcileErrors, WidgetWorkQueueStuck, WidgetOperatorPanics, WidgetAPIClientErrors.",
		rows: []row{{
			title: "Replicas",
			panels: []panel{{
				kind: kindStat, title: "Replicas up", unit: units.Short, w: 6, h: 4,
				desc:    fmt.Sprintf("Webhook-plane replicas Prometheus scrapes successfully (up == 1, the controller plane's targets left out); green at the %d the deployment asks for (the chart's replicaCount). Below it for 15 minutes fires WidgetOperatorDegraded; 0 means no webhook: WidgetWebhookDown.", cfg.ExpectedReplicas),
				steps:   replicaSteps(cfg.ExpectedReplicas),
				queries: []query{{expr: `count((up{` + mgr + `} == 1) unless on (instance) widget_controller_running{` + mgr + `,process="controller"}) or vector(0)`, legend: "up", instant: true}},
			}, {
				kind: kindStat, title: "Leaders", unit: units.Short, w: 6, h: 4,
				desc:     "Replicas holding the widget-operator.widgetry.io lease. Exactly 1 is healthy; 0 or more than 1 for 5 minutes fires WidgetOperatorNoLeader.",
				steps:    []step{base(red), at(1, green), at(2, red)},
				mappings: map[string]string{"0": "no leader"},
				queries:  []query{{expr: `sum(leader_election_master_status{` + mgr + `,name="` + LeaseName + `"}) or vector(0)`, legend: "leaders", instant: true}},
			}, {
				kind: kindTable, title: "Builds running", unit: units.Short, w: 6, h: 4,
				desc:    "Replicas per build version and Go version (widget_build_info). More than one row outside a rollout means replicas run different code.",
				steps:   []step{base(green)},
				queries: []query{{expr: `count by (version, go_version) (widget_build_info{` + mgr + `})`, instant: true, table: true}},
			}, {
				kind: kindTable, title: "Webhook replicas by node", unit: units.Short, w: 6, h: 4,
				desc:    "Webhook-plane replicas per node and zone (widget_replica_placement_info; the zone is empty before Kubernetes 1.35 or on nodes without topology.kubernetes.io/zone). One row with every replica, on a cluster with other schedulable nodes (or zones), for 15 minutes fires WidgetWebhookReplicasNotSpread: one drained or lost node stops conversion.",
				steps:   []step{base(green)},
				queries: []query{{expr: `count by (node, zone) (widget_replica_placement_info{` + mgr + `})`, instant: true, table: true}},
			}},
		}, {
			title: "Reconciliation",
			panels: []panel{{
				kind: kindTimeseries, title: "Reconcile rate by result", unit: units.OpsPerSecond, min: zero(), w: 8, h: 8,
				desc:    "Reconciles of the widget controller per second, by result (success, error, requeue, requeue_after).",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (result) (rate(controller_runtime_reconcile_total{` + crSelector + `}[` + rateWindow + `]))`, legend: "{{result}}"}},
			}, {
				kind: kindTimeseries, title: "Reconcile error ratio", unit: units.PercentUnit, min: zero(), w: 8, h: 8,
				desc:    "Share of reconciles ending in an error. Above 10% for 15 minutes fires WidgetReconcileErrors.",
				steps:   []step{base(green), at(0.1, red)},
				queries: []query{{expr: `(sum(rate(controller_runtime_reconcile_errors_total{` + crSelector + `}[` + rateWindow + `])) or vector(0)) / sum(rate(controller_runtime_reconcile_total{` + crSelector + `}[` + rateWindow + `]))`, legend: "errors"}},
			}, {
				kind: kindTimeseries, title: "Reconcile duration", unit: units.Seconds, min: zero(), w: 8, h: 8,
				desc:  "50th and 99th percentile time of one reconcile of a Widget. A Widget reconcile writes a Deployment, a Service and a catalog ConfigMap; seconds mean a slow apiserver.",
				steps: []step{base(green), at(1, yellow), at(5, red)},
				queries: []query{
					{expr: `histogram_quantile(0.5, sum by (le) (rate(controller_runtime_reconcile_time_seconds_bucket{` + crSelector + `}[` + rateWindow + `])))`, legend: "p50"},
					{expr: `histogram_quantile(0.99, sum by (le) (rate(controller_runtime_reconcile_time_seconds_bucket{` + crSelector + `}[` + rateWindow + `])))`, legend: "p99"},
				},
			}},
		}, {
			title: "Work queue",
			panels: []panel{{
				kind: kindTimeseries, title: "Work queue depth", unit: units.Short, min: zero(), w: 8, h: 8,
				desc:    "Widgets waiting to be reconciled, per replica (only the leader's queue fills). A depth that keeps growing means reconciles cannot keep up; a depth above 0 with no reconcile for 15 minutes fires WidgetWorkQueueStuck.",
				steps:   []step{base(green), at(100, yellow), at(1000, red)},
				queries: []query{{expr: `sum by (instance) (workqueue_depth{` + wq + `})`, legend: "{{instance}}"}},
			}, {
				kind: kindTimeseries, title: "Work queue wait", unit: units.Seconds, min: zero(), w: 8, h: 8,
				desc:  "99th percentile time a Widget waits in the queue before a worker picks it up.",
				steps: []step{base(green), at(1, yellow), at(10, red)},
				queries: []query{
					{expr: `histogram_quantile(0.99, sum by (le) (rate(workqueue_queue_duration_seconds_bucket{` + wq + `}[` + rateWindow + `])))`, legend: "p99"},
				},
			}, {
				kind: kindTimeseries, title: "Longest running reconcile", unit: units.Seconds, min: zero(), w: 8, h: 8,
				desc:  "How long the oldest reconcile still running has run (workqueue_longest_running_processor_seconds), and the work in progress not yet finished, summed (workqueue_unfinished_work_seconds), per replica. A reconcile takes well under a second; over 5 minutes fires WidgetWorkQueueStuck.",
				steps: []step{base(green), at(60, yellow), at(300, red)},
				queries: []query{
					{expr: `max by (instance) (workqueue_longest_running_processor_seconds{` + wq + `})`, legend: "longest {{instance}}"},
					{expr: `max by (instance) (workqueue_unfinished_work_seconds{` + wq + `})`, legend: "unfinished {{instance}}"},
				},
			}},
		}, {
			title: "Panics and API requests",
			panels: []panel{{
				kind: kindTimeseries, title: "Panics recovered", unit: units.Short, min: zero(), w: 8, h: 8,
				desc:  "Panics each part of the manager recovered from in the interval: reconciles (retried), admission reviews (answered HTTP 500: the Widget write is refused), conversion reviews (failed). Any fires WidgetOperatorPanics; the stack trace is in the replica's log.",
				steps: []step{base(green), at(1, red)},
				queries: []query{
					{expr: `sum by (instance) (increase(controller_runtime_reconcile_panics_total{` + mgr + `}[` + rateWindow + `]))`, legend: "reconcile {{instance}}"},
					{expr: `sum by (instance) (increase(controller_runtime_webhook_panics_total{` + mgr + `}[` + rateWindow + `]))`, legend: "admission {{instance}}"},
					{expr: `sum by (instance) (increase(widget_conversion_panics_total{` + mgr + `}[` + rateWindow + `]))`, legend: "conversion {{instance}}"},
				},
			}, {
				kind: kindTimeseries, title: "API requests by code", unit: units.RequestsPerSecond, min: zero(), w: 8, h: 8,
				desc:    "The manager's requests to the apiserver per second by HTTP code (client-go's rest_client_requests_total), per process: manager (the webhooks, the metrics and certificate checks) and controller. <error> is a request that got no answer.",
				steps:   []step{base(green)},
				queries: []query{{expr: processOrManager(`sum by (process, code) (rate(rest_client_requests_total{` + mgr + `}[` + rateWindow + `]))`), legend: "{{process}} {{code}}"}},
			}, {
				kind: kindTimeseries, title: "API request error ratio", unit: units.PercentUnit, min: zero(), w: 8, h: 8,
				desc:    "Share of the manager's requests to the apiserver answered 5xx or 429 (priority and fairness shedding) or not at all, per process. Above 5% on a replica for 15 minutes fires WidgetAPIClientErrors.",
				steps:   []step{base(green), at(0.05, red)},
				queries: []query{{expr: processOrManager(`(` + clientErrors + ` or ` + clientAll + ` * 0) / ` + clientAll), legend: "{{process}}"}},
			}},
		}, {
			title: "Resources (kubelet cAdvisor)",
			panels: []panel{{
				kind: kindTimeseries, title: "CPU usage", unit: units.Short, min: zero(), w: 6, h: 8,
				desc: "CPU cores used per pod and container (container_cpu_usage_seconds_total), with the container's limit (quota / period; the chart's resources.limits.cpu and controllerResources.limits.cpu). " +
					"Needs Prometheus to scrape the kubelets' /metrics/cadvisor; the pods are those the manager's job scrapes.",
				steps: []step{base(green)},
				queries: []query{
					{expr: `sum by (pod, container) (rate(container_cpu_usage_seconds_total{` + cadvisor + `}[` + rateWindow + `])` + onManagerPods + `)`, legend: "{{pod}} {{container}}"},
					{expr: `max by (pod, container) ((container_spec_cpu_quota{` + cadvisor + `} / container_spec_cpu_period{` + cadvisor + `})` + onManagerPods + `)`, legend: "limit {{pod}} {{container}}"},
				},
			}, {
				kind: kindTimeseries, title: "CPU throttling", unit: units.PercentUnit, min: zero(), w: 6, h: 8,
				desc:  "Share of CFS periods in which the container was throttled at its CPU limit. Throttled webhooks answer late: the apiserver's admission and conversion latency rises (WidgetAdmissionWebhookSlow, WidgetConversionWebhookSlow). Above 25% calls for a higher limit.",
				steps: []step{base(green), at(0.25, red)},
				queries: []query{
					{expr: `sum by (pod, container) (rate(container_cpu_cfs_throttled_periods_total{` + cadvisor + `}[` + rateWindow + `])` + onManagerPods + `) / sum by (pod, container) (rate(container_cpu_cfs_periods_total{` + cadvisor + `}[` + rateWindow + `])` + onManagerPods + `)`, legend: "{{pod}} {{container}}"},
				},
			}, {
				kind: kindTimeseries, title: "Memory working set", unit: units.BytesIEC, min: zero(), w: 6, h: 8,
				desc:  "Working set per pod and container (what the kernel counts against the limit) and the container's memory limit (the chart's resources.limits.memory and controllerResources.limits.memory). At the limit the container is OOM-killed; the webhook server refuses requests before that (WidgetWebhookBudgetRefusals).",
				steps: []step{base(green)},
				queries: []query{
					{expr: `max by (pod, container) (container_memory_working_set_bytes{` + cadvisor + `}` + onManagerPods + `)`, legend: "{{pod}} {{container}}"},
					{expr: `max by (pod, container) (container_spec_memory_limit_bytes{` + cadvisor + `} > 0` + onManagerPods + `)`, legend: "limit {{pod}} {{container}}"},
				},
			}, {
				kind: kindTimeseries, title: "Restarts in the last hour", unit: units.Short, min: zero(), w: 6, h: 8,
				desc:    "Restarts per pod and process over the last hour: changes of process_start_time_seconds, so no kube-state-metrics is needed (manager: the webhooks' container; controller: the controller's). A new pod is not a restart.",
				steps:   []step{base(green), at(1, yellow), at(3, red)},
				queries: []query{{expr: processOrManager(`sum by (pod, process) (changes(process_start_time_seconds{` + mgr + `}[1h]))`), legend: "{{pod}} {{process}}"}},
			}},
		}},
	}
}

func webhooks() dashboardSpec {
	const crd = cl + `,crd_name="` + WidgetCRD + `"`
	// The apiserver's admission metrics of our two webhooks.
	apiAdmission := cl + `,name=~"` + admissionWebhooks + `"`
	admissionCalls := `sum by (name) (rate(apiserver_admission_webhook_request_total{` + apiAdmission + `}[` + rateWindow + `]))`
	return dashboardSpec{
		file: "widget-operator-webhooks", uid: "widget-operator-webhooks", title: "widget-operator / Webhooks",
		desc: "Admission and conversion webhooks from the manager's side and from the apiserver's: only the apiserver sees calls that never reach the manager, and controller-runtime answers HTTP 200 even for an errored admission review. Alerts: WidgetConversionWebhookErrors, WidgetConversionWebhookSlow, WidgetAdmissionWebhookErrors, WidgetAdmissionWebhookSlow, WidgetWebhookDown.",
		rows: []row{{
			title: "Traffic",
			panels: []panel{{
				kind: kindTimeseries, title: "Conversion requests by version pair", unit: units.RequestsPerSecond, min: zero(), w: 6, h: 8,
				desc:    "ConversionReview requests per second answered by the manager, by source version, desired version and result (success, failure: refused, error: malformed).",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (from_version, to_version, result) (rate(widget_conversion_requests_total{` + mgr + `}[` + rateWindow + `]))`, legend: "{{from_version}} → {{to_version}} {{result}}"}},
			}, {
				kind: kindTimeseries, title: "Objects converted", unit: units.OpsPerSecond, min: zero(), w: 6, h: 8,
				desc:    "Widgets converted per second. The apiserver converts one object at a time as it decodes it from etcd: each write through a version that is not stored, each served version's watch cache, and after a change to the CRD's spec one review per Widget while those caches are rebuilt (a burst that ends by itself). A LIST served from the caches converts nothing.",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (from_version, to_version) (rate(widget_conversion_objects_total{` + mgr + `}[` + rateWindow + `]))`, legend: "{{from_version}} → {{to_version}}"}},
			}, {
				kind: kindTimeseries, title: "Objects per ConversionReview", unit: units.Short, min: zero(), w: 6, h: 8,
				desc:  "The most objects one review held, and the mean (widget_conversion_review_objects). The apiserver sends one; more come from a client that sends its own reviews. The body limit and the in-flight budget bound what any review can hold.",
				steps: []step{base(green)},
				queries: []query{
					{expr: `histogram_quantile(1, sum by (le) (rate(widget_conversion_review_objects_bucket{` + mgr + `}[` + rateWindow + `])))`, legend: "largest (bucket bound)"},
					{expr: `sum(rate(widget_conversion_review_objects_sum{` + mgr + `}[` + rateWindow + `])) / sum(rate(widget_conversion_review_objects_count{` + mgr + `}[` + rateWindow + `]))`, legend: "mean"},
				},
			}, {
				kind: kindTimeseries, title: "Admission calls by webhook and code (apiserver)", unit: units.RequestsPerSecond, min: zero(), w: 6, h: 8,
				desc:    "The apiserver's calls to the defaulting (" + MutatingWebhookName + ", UPDATE only) and validating (" + ValidatingWebhookName + ") webhooks per second, by the code it recorded: 200 allowed, 4xx denied by validation (normal), 5xx or 0 an error (the mutating webhook's write was refused, failurePolicy Fail; the validating webhook's admitted without it, failurePolicy Ignore).",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (name, code) (rate(apiserver_admission_webhook_request_total{` + apiAdmission + `}[` + rateWindow + `]))`, legend: "{{name}} {{code}}"}},
			}},
		}, {
			title: "Errors",
			panels: []panel{{
				kind: kindTimeseries, title: "Error ratio", unit: units.PercentUnit, min: zero(), w: 12, h: 8,
				desc: "Share of requests that did not succeed: conversion at the manager, conversion at the apiserver (includes TLS and connection failures that never reach the manager), and the apiserver's admission calls per webhook that failed (calling errors, internal errors, 5xx answers, fail-opens of the validating webhook; denials are not errors). " +
					"Conversion above 5% for 10 minutes fires WidgetConversionWebhookErrors, admission WidgetAdmissionWebhookErrors.",
				steps: []step{base(green), at(0.05, red)},
				queries: []query{
					{expr: `(sum(rate(widget_conversion_requests_total{` + mgr + `,result!="success"}[` + rateWindow + `])) or vector(0)) / sum(rate(widget_conversion_requests_total{` + mgr + `}[` + rateWindow + `]))`, legend: "conversion (manager)"},
					{expr: `(sum(rate(apiserver_crd_conversion_webhook_duration_seconds_count{` + crd + `,succeeded="false"}[` + rateWindow + `])) or vector(0)) / sum(rate(apiserver_crd_conversion_webhook_duration_seconds_count{` + crd + `}[` + rateWindow + `]))`, legend: "conversion (apiserver)"},
					{expr: `(sum by (name) (rate(apiserver_admission_webhook_rejection_count{` + apiAdmission + `,error_type=~"calling_webhook_error|apiserver_internal_error"}[` + rateWindow + `]) or rate(apiserver_admission_webhook_rejection_count{` + apiAdmission + `,rejection_code=~"5.."}[` + rateWindow + `]) or rate(apiserver_admission_webhook_fail_open_count{` + apiAdmission + `}[` + rateWindow + `])) or ` + admissionCalls + ` * 0) / ` + admissionCalls, legend: "admission {{name}} (apiserver)"},
				},
			}, {
				kind: kindTimeseries, title: "Conversion failures by reason", unit: units.RequestsPerSecond, min: zero(), w: 12, h: 8,
				desc:    "Failed ConversionReview requests per second by reason (MalformedRequest, UnsupportedVersion, ConversionFailed, …). ConversionFailed usually names one object in the manager's log.",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (reason) (rate(widget_conversion_failures_total{` + mgr + `}[` + rateWindow + `]))`, legend: "{{reason}}"}},
			}},
		}, {
			title: "Latency",
			panels: []panel{{
				kind: kindTimeseries, title: "Conversion latency per version pair (manager)", unit: units.Seconds, min: zero(), w: 6, h: 8,
				desc:  "50th and 99th percentile time the manager takes to answer one ConversionReview, by version pair. p99 above 250ms for 15 minutes fires WidgetConversionWebhookSlow.",
				steps: []step{base(green), at(0.25, red)},
				queries: []query{
					{expr: `histogram_quantile(0.5, sum by (le, from_version, to_version) (rate(widget_conversion_duration_seconds_bucket{` + mgr + `}[` + rateWindow + `])))`, legend: "p50 {{from_version}} → {{to_version}}"},
					{expr: `histogram_quantile(0.99, sum by (le, from_version, to_version) (rate(widget_conversion_duration_seconds_bucket{` + mgr + `}[` + rateWindow + `])))`, legend: "p99 {{from_version}} → {{to_version}}"},
				},
			}, {
				kind: kindTimeseries, title: "Conversion latency seen by the apiserver", unit: units.Seconds, min: zero(), w: 6, h: 8,
				desc:  "99th percentile of the apiserver's conversion calls for widgets.widgetry.io, including network and TLS. Every read or write through a non-storage version waits this long. Above 1s for 15 minutes fires WidgetConversionWebhookSlow.",
				steps: []step{base(green), at(1, red)},
				queries: []query{
					{expr: `histogram_quantile(0.99, sum by (le, from_version, to_version) (rate(apiserver_crd_conversion_webhook_duration_seconds_bucket{` + crd + `}[` + rateWindow + `])))`, legend: "p99 {{from_version}} → {{to_version}}"},
				},
			}, {
				kind: kindTimeseries, title: "Admission latency seen by the apiserver", unit: units.Seconds, min: zero(), w: 6, h: 8,
				desc:  "99th percentile of the apiserver's calls to each admission webhook, including network and TLS (apiserver_admission_webhook_admission_duration_seconds). Every Widget write waits this long; above 1s for 15 minutes fires WidgetAdmissionWebhookSlow, and at the webhook's timeoutSeconds the write fails.",
				steps: []step{base(green), at(1, red)},
				queries: []query{
					{expr: `histogram_quantile(0.99, sum by (le, name) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{` + apiAdmission + `}[` + rateWindow + `])))`, legend: "p99 {{name}}"},
				},
			}, {
				kind: kindTimeseries, title: "Webhook latency by path (manager)", unit: units.Seconds, min: zero(), w: 6, h: 8,
				desc:  "99th percentile handling time per webhook path inside the manager (controller-runtime's webhook server: /convert and the admission paths); the apiserver's panels add the network and TLS.",
				steps: []step{base(green), at(0.5, yellow), at(2, red)},
				queries: []query{
					{expr: `histogram_quantile(0.99, sum by (le, webhook) (rate(controller_runtime_webhook_latency_seconds_bucket{` + mgr + `}[` + rateWindow + `])))`, legend: "p99 {{webhook}}"},
				},
			}},
		}},
	}
}

func apiUpgrade() dashboardSpec {
	const deprecated = cl + `,group="widgetry.io",version="v1alpha1",resource="widgets"`
	const crdInfo = mgr + `,crd="` + WidgetCRD + `"`
	return dashboardSpec{
		file: "widget-operator-api-upgrade", uid: "widget-operator-api-upgrade", title: "widget-operator / API upgrade",
		desc: "The staged move of widgets.widgetry.io from v1alpha1 to v1 as the CRD shows it: served and storage flags, storedVersions, storage migration and remaining v1alpha1 clients. The stage itself: widgetctl upgrade status. Runbooks: runbooks/upgrade/<stage>.md. Alerts: WidgetStorageMigrationFailed, WidgetStorageMigrationStalled, WidgetStoredVersionsNotTrimmed, WidgetDeprecatedVersionInUse.",
		rows: []row{{
			title: "Versions",
			panels: []panel{{
				kind: kindStat, title: "Storage version", unit: units.Short, w: 6, h: 6, textName: true,
				desc:    "The version spec.versions marks storage=true (new and updated Widgets are stored in it). It alone does not tell the stage: flip-storage and migrate differ only in storedVersions (the panel beside), and each stage's flags are at the top of its runbook, runbooks/upgrade/<stage>.md; widgetctl upgrade status tells the stage.",
				steps:   []step{base(blue)},
				queries: []query{{expr: `max by (version) (widget_crd_version_info{` + crdInfo + `,storage="true"})`, legend: "{{version}}", instant: true}},
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
				kind: kindTimeseries, title: "Requests by API version", unit: units.RequestsPerSecond, min: zero(), w: 10, h: 8,
				desc:    "Requests for widgets per second by API version, from the apiserver's metrics, dry runs left out (the chart's hooks probe with them). v1alpha1 traffic after flip-storage comes from other clients and breaks at unserve.",
				steps:   []step{base(green)},
				queries: []query{{expr: `sum by (version) (rate(apiserver_request_total{` + cl + `,group="widgetry.io",resource="widgets",dry_run=""}[` + rateWindow + `]))`, legend: "{{version}}"}},
			}, {
				kind: kindTimeseries, title: "Deprecated v1alpha1 requests", unit: units.RequestsPerSecond, min: zero(), w: 10, h: 8,
				desc:  "Requests for widgets.widgetry.io/v1alpha1 by verb, dry runs left out as the alert does. Continuing traffic after flip-storage fires WidgetDeprecatedVersionInUse.",
				steps: []step{base(green), at(0.001, yellow)},
				queries: []query{
					{expr: `sum by (verb) (rate(apiserver_request_total{` + deprecated + `,dry_run=""}[` + rateWindow + `]))`, legend: "{{verb}}"},
				},
			}, {
				kind: kindStat, title: "v1alpha1 requested since apiserver start", unit: units.Short, w: 4, h: 8,
				desc:     "Whether any kube-apiserver has served the deprecated v1alpha1 since it started (apiserver_requested_deprecated_apis). It never goes back to no until the apiserver restarts, so it says nothing about now: the request panels do.",
				steps:    []step{base(green), at(1, yellow)},
				mappings: map[string]string{"0": "no", "1": "yes"},
				queries:  []query{{expr: `max(apiserver_requested_deprecated_apis{` + deprecated + `}) or vector(0)`, legend: "requested", instant: true}},
			}},
		}},
	}
}

func certificates(cfg Config) dashboardSpec {
	const expiry = `widget_webhook_certificate_expiry_timestamp_seconds{` + mgr + `}`
	const notBefore = `widget_webhook_certificate_not_before_timestamp_seconds{` + mgr + `}`
	cm := cl + `,name="` + cfg.Certificate + `"`
	return dashboardSpec{
		file: "widget-operator-certificates", uid: "widget-operator-certificates", title: "widget-operator / Certificates",
		desc: "The webhook serving certificate each replica presents, and cert-manager's Certificate " + cfg.Certificate + " it comes from. Alerts: WidgetWebhookCertificateExpiresSoon, WidgetWebhookCertificateNotReady, WidgetWebhookCertificateRenewalOverdue, WidgetWebhookCertificateStale, WidgetWebhookCertificateRenewalHeld, WidgetWebhookDown. Procedure: runbooks/procedures/certificate-rotation.md.",
		rows: []row{{
			title: "Served by the replicas",
			panels: []panel{{
				kind: kindStat, title: "Replicas serving a valid certificate", unit: units.Short, w: 6, h: 5,
				desc:    fmt.Sprintf("Replicas that are up and present a certificate that has not expired; green at the %d the deployment asks for (the chart's replicaCount). A replica without a certificate is not ready and is not counted; 0 is WidgetWebhookDown.", cfg.ExpectedReplicas),
				steps:   replicaSteps(cfg.ExpectedReplicas),
				queries: []query{{expr: `count(up{` + mgr + `} == 1 and on (cluster, namespace, instance) (` + expiry + ` > time())) or vector(0)`, legend: "serving", instant: true}},
			}, {
				kind: kindStat, title: "Lifetime left (lowest replica)", unit: units.PercentUnit, w: 6, h: 5,
				desc:    "The smallest share of its lifetime (NotAfter - NotBefore) any replica's certificate has left. cert-manager renews with a third left by default; under a fifth (at most 7 days) fires WidgetWebhookCertificateExpiresSoon, under a tenth (at most a day) critical.",
				steps:   []step{base(red), at(0.1, yellow), at(0.2, green)},
				queries: []query{{expr: `min((` + expiry + ` - time()) / (` + expiry + ` - ` + notBefore + `))`, legend: "left", instant: true}},
			}, {
				kind: kindTable, title: "Expiry per replica", unit: "dateTimeAsIso", w: 12, h: 5,
				desc:    "NotAfter of the certificate each replica serves. Replicas differing after a rotation have not reloaded (certwatcher polls the mounted Secret).",
				steps:   []step{base(green)},
				queries: []query{{expr: expiry + ` * 1000`, instant: true, table: true}},
			}, {
				kind: kindTimeseries, title: "Time to expiry per replica", unit: units.Seconds, w: 24, h: 8,
				desc:  "Time until each replica's serving certificate expires, and until the one cert-manager last issued does. A sawtooth is healthy: cert-manager renews, the replica reloads, the line jumps up; a replica below cert-manager's line serves an older certificate than the Secret holds.",
				steps: []step{base(green)},
				queries: []query{
					{expr: expiry + ` - time()`, legend: "{{instance}}"},
					{expr: `max(certmanager_certificate_expiration_timestamp_seconds{` + cm + `} > 0) - time()`, legend: "issued by cert-manager"},
				},
			}},
		}, {
			title: "cert-manager Certificate",
			panels: []panel{{
				kind: kindStat, title: "Ready", unit: units.Short, w: 6, h: 5,
				desc:     "cert-manager's Ready condition of the Certificate (certmanager_certificate_ready_status). Not ready for 15 minutes fires WidgetWebhookCertificateNotReady. No data: Prometheus does not scrape cert-manager's controller.",
				steps:    []step{base(red), at(1, green)},
				mappings: map[string]string{"0": "not ready", "1": "ready"},
				queries:  []query{{expr: `max(certmanager_certificate_ready_status{` + cm + `,condition="True"})`, legend: "ready", instant: true}},
			}, {
				kind: kindStat, title: "Renewal due in", unit: units.Seconds, w: 6, h: 5,
				desc:    "Time until cert-manager renews the Certificate (status.renewalTime); negative: the renewal is overdue by that much. Overdue by an hour for 15 minutes fires WidgetWebhookCertificateRenewalOverdue.",
				steps:   []step{base(red), at(-3600, yellow), at(0, green)},
				queries: []query{{expr: `min(certmanager_certificate_renewal_timestamp_seconds{` + cm + `} > 0) - time()`, legend: "renewal", instant: true}},
			}, {
				kind: kindStat, title: "Replicas behind the Secret", unit: units.Short, w: 6, h: 5,
				desc:    "Replicas presenting a certificate that expires before the one cert-manager last issued: they have not reloaded the renewed Secret (the kubelet refreshes it within minutes). For 15 minutes fires WidgetWebhookCertificateStale, unless the renewal is held on purpose (the panel beside).",
				steps:   []step{base(green), at(1, yellow)},
				queries: []query{{expr: `count(max by (cluster, namespace, instance) (` + expiry + `) < on (cluster, namespace) group_left () max by (cluster, namespace) (` + certManagerNamespace(`certmanager_certificate_expiration_timestamp_seconds{`+cm+`}`) + `)) or vector(0)`, legend: "behind", instant: true}},
			}, {
				kind: kindStat, title: "Replicas holding a renewal", unit: units.Short, w: 6, h: 5,
				desc:    "Replicas that have a renewed certificate on disk but keep serving the current one because a caBundle does not trust the new CA yet (widget_webhook_certificate_renewal_held). A minute during a CA rotation is normal; 30 minutes fires WidgetWebhookCertificateRenewalHeld.",
				steps:   []step{base(green), at(1, yellow)},
				queries: []query{{expr: `sum(widget_webhook_certificate_renewal_held{` + mgr + `}) or vector(0)`, legend: "holding", instant: true}},
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
		if p.textName {
			b = b.TextMode(common.BigValueTextModeName)
		}
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

func (d dashboardSpec) build(cfg Config) (dashboard.Dashboard, error) {
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
			Description("Prometheus that scrapes the manager (and the apiserver, the kubelets' cAdvisor and cert-manager, for their panels).")).
		WithVariable(dashboard.NewQueryVariableBuilder(varCluster).Label("Cluster").Datasource(ds).
			Description("The cluster label of a Prometheus that holds several clusters; All also matches series without a cluster label, so a single cluster needs none.").
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(widget_build_info, cluster)")}).
			IncludeAll(true).AllValue(".*").
			Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)).
		WithVariable(dashboard.NewQueryVariableBuilder(varJob).Label("Job").Datasource(ds).
			Description("Prometheus job label of the manager's metrics endpoint.").
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(widget_build_info{` + cl + `}, job)`)}).
			Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(cfg.Job)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(cfg.Job)}}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)).
		WithVariable(dashboard.NewQueryVariableBuilder(varNamespace).Label("Namespace").Datasource(ds).
			Description("Namespace of the manager; All also matches targets without a namespace label.").
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(widget_build_info{` + cl + `,job="$job"}, namespace)`)}).
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

// Dashboards returns the JSON of every dashboard by file name (dashboards/<name>.json), for the
// default configuration.
func Dashboards() (map[string][]byte, error) {
	return DashboardsFor(DefaultConfig())
}

// DashboardsFor returns the JSON of every dashboard by file name for cfg: the job variable's
// default, the expected replicas the replica panels are green at and the cert-manager
// Certificate the certificate panels read (the runbook base URL is not used).
func DashboardsFor(cfg Config) (map[string][]byte, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, d := range specs(cfg) {
		built, err := d.build(cfg)
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

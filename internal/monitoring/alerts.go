package monitoring

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Alert names (kubernetes-mixin style, <Component><Condition>). Each has a runbook page
// runbooks/alerts/<name>.md.
const (
	AlertConversionWebhookErrors          = "WidgetConversionWebhookErrors"
	AlertConversionWebhookSlow            = "WidgetConversionWebhookSlow"
	AlertWebhookDown                      = "WidgetWebhookDown"
	AlertOperatorNoLeader                 = "WidgetOperatorNoLeader"
	AlertOperatorDegraded                 = "WidgetOperatorDegraded"
	AlertWebhookReplicasNotSpread         = "WidgetWebhookReplicasNotSpread"
	AlertReconcileErrors                  = "WidgetReconcileErrors"
	AlertWebhookCertificateExpiresSoon    = "WidgetWebhookCertificateExpiresSoon"
	AlertWebhookCertificateRenewalHeld    = "WidgetWebhookCertificateRenewalHeld"
	AlertStorageMigrationFailed           = "WidgetStorageMigrationFailed"
	AlertStorageMigrationStalled          = "WidgetStorageMigrationStalled"
	AlertStoredVersionsNotTrimmed         = "WidgetStoredVersionsNotTrimmed"
	AlertDeprecatedVersionInUse           = "WidgetDeprecatedVersionInUse"
	AlertCRDBreakGlass                    = "WidgetCRDBreakGlass"
	AlertControllerPaused                 = "WidgetControllerPaused"
	AlertControllerNotRunning             = "WidgetControllerNotRunning"
	AlertWebhookBudgetRefusals            = "WidgetWebhookBudgetRefusals"
	AlertAdmissionWebhookErrors           = "WidgetAdmissionWebhookErrors"
	AlertAdmissionWebhookSlow             = "WidgetAdmissionWebhookSlow"
	AlertWebhookCertificateNotReady       = "WidgetWebhookCertificateNotReady"
	AlertWebhookCertificateRenewalOverdue = "WidgetWebhookCertificateRenewalOverdue"
	AlertWebhookCertificateStale          = "WidgetWebhookCertificateStale"
	AlertOperatorPanics                   = "WidgetOperatorPanics"
	AlertWorkQueueStuck                   = "WidgetWorkQueueStuck"
	AlertAPIClientErrors                  = "WidgetAPIClientErrors"
	AlertConversionDegraded               = "WidgetConversionDegraded"
	AlertControllerMemoryNearLimit        = "WidgetControllerMemoryNearLimit"
)

// Severities, as kubernetes-mixin uses them: critical pages, warning is looked at in working
// hours, info only adds context.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
	SeverityInfo     = "info"
)

// RuleFile is a Prometheus rules file.
type RuleFile struct {
	Groups []RuleGroup `yaml:"groups"`
}

// RuleGroup is one group of a rules file.
type RuleGroup struct {
	Name  string `yaml:"name"`
	Rules []Rule `yaml:"rules"`
}

// Rule is one alerting rule.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alert is a rule before configuration: expr holds the tokens {{job}}, {{crd}}, {{lease}},
// {{replicas}}, {{certificate}} and {{admission_webhooks}} (never Prometheus' own
// {{ $labels.x }} templating, which only annotations use).
type alert struct {
	name, expr, dur, severity, summary, description string
	// source tells apart two rules of one alert that measure at different places (manager,
	// apiserver); it becomes a label so that the rules are not duplicates.
	source string
	// symptom tells apart two rules of one alert that measure at the same place but see
	// different things; a label too, for the same reason.
	symptom string
}

func alertGroups() []struct {
	name   string
	alerts []alert
} {
	return []struct {
		name   string
		alerts []alert
	}{{
		name: "widget-operator.webhooks",
		alerts: []alert{{
			name: AlertConversionWebhookErrors,
			// Seen by the manager: requests that reached /convert and were refused or malformed.
			expr: `sum by (namespace, job) (rate(widget_conversion_requests_total{job="{{job}}",result!="success"}[5m]))
  /
sum by (namespace, job) (rate(widget_conversion_requests_total{job="{{job}}"}[5m]))
  > 0.05`,
			dur: "10m", severity: SeverityCritical, source: "manager",
			summary:     "Widget conversion webhook answers with errors.",
			description: "{{ $value | humanizePercentage }} of ConversionReview requests to job {{ $labels.job }} in namespace {{ $labels.namespace }} failed in the last 5 minutes. Reads and writes of Widgets through the version that needs conversion fail.",
		}, {
			name: AlertConversionWebhookErrors,
			// Seen by the apiserver: includes what never reaches the manager (TLS trust, no
			// endpoints, timeouts).
			expr: `sum by (crd_name) (rate(apiserver_crd_conversion_webhook_duration_seconds_count{crd_name="{{crd}}",succeeded="false"}[5m]))
  /
sum by (crd_name) (rate(apiserver_crd_conversion_webhook_duration_seconds_count{crd_name="{{crd}}"}[5m]))
  > 0.05`,
			dur: "10m", severity: SeverityCritical, source: "apiserver",
			summary:     "The apiserver fails to convert Widgets.",
			description: "{{ $value | humanizePercentage }} of the apiserver's conversions of {{ $labels.crd_name }} failed in the last 5 minutes (TLS trust, unreachable webhook, timeouts or refused conversions).",
		}, {
			name: AlertConversionWebhookSlow,
			expr: `histogram_quantile(0.99, sum by (namespace, job, le) (rate(widget_conversion_duration_seconds_bucket{job="{{job}}"}[5m])))
  > 0.25`,
			dur: "15m", severity: SeverityWarning, source: "manager",
			summary:     "Widget conversion webhook is slow.",
			description: "The 99th percentile of ConversionReview handling in job {{ $labels.job }} (namespace {{ $labels.namespace }}) is {{ $value | humanizeDuration }}; conversion normally takes well under a millisecond per object.",
		}, {
			name: AlertConversionWebhookSlow,
			expr: `histogram_quantile(0.99, sum by (crd_name, le) (rate(apiserver_crd_conversion_webhook_duration_seconds_bucket{crd_name="{{crd}}"}[5m])))
  > 1`,
			dur: "15m", severity: SeverityWarning, source: "apiserver",
			summary:     "The apiserver waits long for Widget conversions.",
			description: "The 99th percentile of conversion calls the apiserver makes for {{ $labels.crd_name }} is {{ $value | humanizeDuration }} (network, TLS and handler time); every read and write through a non-storage version waits that long.",
		}, {
			name: AlertWebhookDown,
			// A replica serves the webhook only when it is up and has a serving certificate that
			// has not expired (readyz waits for the certificate).
			expr: `absent(
  up{job="{{job}}"} == 1
    and on (instance)
  (widget_webhook_certificate_expiry_timestamp_seconds{job="{{job}}"} > time())
)`,
			dur: "2m", severity: SeverityCritical,
			summary:     "No widget-operator replica can serve the webhooks.",
			description: "No replica of job {{job}} is up with a valid serving certificate. The conversion webhook has no failurePolicy: Widgets cannot be read or written through a converted version, garbage collection of Widgets stalls and namespaces holding Widgets hang in Terminating.",
		}, {
			name: AlertAdmissionWebhookErrors,
			// Only the apiserver sees these: controller-runtime answers HTTP 200 even for a
			// review it errored, and a call that fails (TLS trust, no endpoints, timeout) never
			// reaches the manager. The mutating webhook is failurePolicy Fail, so each of its
			// errors is a refused write (a rejection); the validating one is Ignore, so each of
			// its errors is a write admitted without it (a fail-open). A denial (error_type
			// no_error with a 4xx code) is validation doing its job and does not count; a 5xx
			// answer (a recovered panic) does.
			expr: `sum by (name, type) (
    rate(apiserver_admission_webhook_rejection_count{name=~"{{admission_webhooks}}",error_type=~"calling_webhook_error|apiserver_internal_error"}[5m])
  or
    rate(apiserver_admission_webhook_rejection_count{name=~"{{admission_webhooks}}",rejection_code=~"5.."}[5m])
  or
    rate(apiserver_admission_webhook_fail_open_count{name=~"{{admission_webhooks}}"}[5m])
)
  /
sum by (name, type) (rate(apiserver_admission_webhook_request_total{name=~"{{admission_webhooks}}"}[5m]))
  > 0.05`,
			dur: "10m", severity: SeverityCritical,
			summary:     "The apiserver's calls to a Widget admission webhook fail.",
			description: "{{ $value | humanizePercentage }} of the apiserver's calls to admission webhook {{ $labels.name }} ({{ $labels.type }}) failed in the last 5 minutes: unreachable, TLS trust, timeout, or answered with a server error. Through the mutating webhook (failurePolicy Fail) those Widget writes were refused; through the validating one (failurePolicy Ignore) they were admitted with the CRD's rules and the warnings policy only.",
		}, {
			name: AlertAdmissionWebhookSlow,
			// The apiserver's view includes the network and TLS; every Widget write (the mutating
			// webhook: every UPDATE) waits this long, and at webhook.timeoutSeconds it fails.
			expr: `histogram_quantile(0.99, sum by (name, type, le) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{name=~"{{admission_webhooks}}"}[5m])))
  > 1`,
			dur: "15m", severity: SeverityWarning,
			summary:     "The apiserver waits long for a Widget admission webhook.",
			description: "The 99th percentile of the apiserver's calls to admission webhook {{ $labels.name }} ({{ $labels.type }}) is {{ $value | humanizeDuration }} (network, TLS and handler time); Widget writes wait that long, and fail once it reaches the webhook's timeoutSeconds.",
		}},
	}, {
		name: "widget-operator.manager",
		alerts: []alert{{
			name: AlertOperatorNoLeader,
			// Non-leaders report 0, so the sum is the number of leaders; the `or` keeps a 0 when
			// no replica reports the lease at all but targets exist.
			expr: `(
  sum by (namespace, job) (leader_election_master_status{job="{{job}}",name="{{lease}}"})
    or
  sum by (namespace, job) (up{job="{{job}}"}) * 0
) != 1`,
			dur: "5m", severity: SeverityCritical,
			summary:     "widget-operator has no single leader.",
			description: "{{ $value }} replicas of job {{ $labels.job }} in namespace {{ $labels.namespace }} hold the {{lease}} lease (want exactly 1). Nothing reconciles Widgets, removes the widgetry.io/catalog-cleanup finalizer or runs migrations.",
		}, {
			name: AlertOperatorDegraded,
			// The webhook plane's replicas: the controller plane's targets (their series say
			// process="controller") are left out, or two controllers up would hide two webhook
			// replicas down.
			expr: `(
  count by (namespace, job) ((up{job="{{job}}"} == 1) unless on (instance) widget_controller_running{job="{{job}}",process="controller"})
    or
  sum by (namespace, job) (up{job="{{job}}"}) * 0
) < {{replicas}}`,
			dur: "15m", severity: SeverityWarning,
			summary:     "Fewer widget-operator webhook replicas are up than desired.",
			description: "{{ $value }} of {{replicas}} webhook-plane replicas of job {{ $labels.job }} in namespace {{ $labels.namespace }} are up. Conversion and admission have less redundancy; one more loss stops conversion.",
		}, {
			name: AlertWebhookReplicasNotSpread,
			// Every webhook replica (widget_replica_placement_info: only the processes that
			// serve the webhooks export it) on one node, while the cluster has other nodes to
			// spread to (kube-state-metrics): one drained or lost node stops conversion. On a
			// one-node cluster, or without kube-state-metrics, it cannot be helped or told, and
			// stays silent.
			expr: `count by (namespace, job) (widget_replica_placement_info{job="{{job}}"}) > 1
  unless on (namespace, job)
count by (namespace, job) (count by (namespace, job, node) (widget_replica_placement_info{job="{{job}}"})) > 1
  and on ()
count(kube_node_spec_unschedulable == 0) > 1`,
			dur: "15m", severity: SeverityWarning, symptom: "node",
			summary:     "Every widget-operator webhook replica runs on one node.",
			description: "All {{ $value }} webhook-plane replicas of job {{ $labels.job }} in namespace {{ $labels.namespace }} run on one node, though the cluster has other schedulable nodes: draining or losing that node stops conversion and admission for every Widget, whatever the PodDisruptionBudget says.",
		}, {
			name: AlertWebhookReplicasNotSpread,
			// The same for zones: the replicas' zone is their node's topology.kubernetes.io/zone
			// label, copied onto the pod when it is bound (Kubernetes 1.35 on); the cluster's
			// zones come from kube-state-metrics' kube_node_labels, which carries the zone label
			// only when allowed (--metric-labels-allowlist=nodes=[topology.kubernetes.io/zone]).
			expr: `count by (namespace, job) (widget_replica_placement_info{job="{{job}}",zone!=""}) > 1
  unless on (namespace, job)
count by (namespace, job) (count by (namespace, job, zone) (widget_replica_placement_info{job="{{job}}",zone!=""})) > 1
  and on ()
count(count by (label_topology_kubernetes_io_zone) (kube_node_labels{label_topology_kubernetes_io_zone!=""})) > 1`,
			dur: "15m", severity: SeverityWarning, symptom: "zone",
			summary:     "Every widget-operator webhook replica runs in one zone.",
			description: "All {{ $value }} webhook-plane replicas of job {{ $labels.job }} in namespace {{ $labels.namespace }} run in one zone of a cluster that has several: a zone outage stops conversion and admission for every Widget.",
		}, {
			name: AlertReconcileErrors,
			expr: `sum by (namespace, job, controller) (rate(controller_runtime_reconcile_errors_total{job="{{job}}",controller="widget"}[5m]))
  /
sum by (namespace, job, controller) (rate(controller_runtime_reconcile_total{job="{{job}}",controller="widget"}[5m]))
  > 0.1`,
			dur: "15m", severity: SeverityWarning,
			summary:     "Widget reconciles fail.",
			description: "{{ $value | humanizePercentage }} of reconciles of controller {{ $labels.controller }} in job {{ $labels.job }} (namespace {{ $labels.namespace }}) ended in an error over the last 5 minutes.",
		}, {
			name: AlertOperatorPanics,
			// Every panic is recovered (controller-runtime retries the reconcile or fails the
			// admission review with HTTP 500; the conversion handler fails the review), so nothing
			// crashes and nothing else shows it: a bug, worth a look even once. The three counters
			// have the same labels, so each gets a component label before the or.
			expr: `sum by (namespace, job, instance, component) (
    label_replace(increase(controller_runtime_reconcile_panics_total{job="{{job}}"}[10m]), "component", "reconcile", "", "")
  or
    label_replace(increase(controller_runtime_webhook_panics_total{job="{{job}}"}[10m]), "component", "admission webhook", "", "")
  or
    label_replace(increase(widget_conversion_panics_total{job="{{job}}"}[10m]), "component", "conversion webhook", "", "")
) > 0`,
			severity: SeverityWarning,
			summary:  "widget-operator recovered from panics.",
			description: "Replica {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) recovered from {{ $value | humanize }} panics in the {{ $labels.component }} in the last 10 minutes. " +
				"Each failed what it was doing (a reconcile, retried with backoff; an admission review, a refused Widget write; a conversion review, a failed read) and the process went on. A panic is a bug: the stack trace is in that replica's log.",
		}, {
			name: AlertWorkQueueStuck,
			// A Widget reconcile takes well under a second; one running for minutes hangs (an API
			// call without a deadline, a lock), and a worker that never returns stops serving.
			expr:     `max by (namespace, job, instance) (workqueue_longest_running_processor_seconds{job="{{job}}",name="widget"}) > 300`,
			dur:      "5m",
			symptom:  "long-running",
			severity: SeverityWarning,
			summary:  "A Widget reconcile has been running for minutes.",
			description: "The longest running reconcile of the widget controller on replica {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) has run for {{ $value | humanizeDuration }}. " +
				"Its worker is stuck; with every worker stuck no Widget is reconciled and deletions wait on the catalog finalizer.",
		}, {
			name: AlertWorkQueueStuck,
			// Widgets wait but none was reconciled for 15 minutes: the workers are stuck or gone.
			// The standby replicas' queues stay empty, and the paused controller still reconciles
			// (it writes the Paused condition), so neither fires this.
			expr: `max by (namespace, job, instance) (workqueue_depth{job="{{job}}",name="widget"}) > 0
  unless on (namespace, job, instance)
sum by (namespace, job, instance) (increase(controller_runtime_reconcile_total{job="{{job}}",controller="widget"}[15m])) > 0`,
			dur:      "15m",
			symptom:  "not-draining",
			severity: SeverityWarning,
			summary:  "The Widget work queue does not drain.",
			description: "{{ $value }} Widgets wait in the widget controller's queue on replica {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) and no reconcile finished there in 15 minutes. " +
				"No Widget gets its Deployment, Service, finalizer or status updated.",
		}, {
			name: AlertAPIClientErrors,
			// The manager's requests to the apiserver, both processes (the controller's series are
			// labelled process="controller"; the webhooks' carry none, named manager here after
			// their container). 429 is the apiserver's priority and fairness shedding them,
			// <error> a request that got no answer at all.
			expr: `label_replace(
  sum by (namespace, job, instance, process) (rate(rest_client_requests_total{job="{{job}}",code=~"5..|429|<error>"}[5m]))
    /
  sum by (namespace, job, instance, process) (rate(rest_client_requests_total{job="{{job}}"}[5m])),
  "process", "manager", "process", ""
) > 0.05`,
			dur: "15m", severity: SeverityWarning,
			summary: "widget-operator's requests to the apiserver fail.",
			description: "{{ $value | humanizePercentage }} of the API requests of the {{ $labels.process }} process on replica {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) failed with 5xx, 429 or no answer in the last 5 minutes. " +
				"Reconciles, the CRD and migration metrics, the certificate trust checks and the CA bundle updates that depend on them fail and are retried.",
		}},
	}, {
		name: "widget-operator.certificates",
		alerts: []alert{{
			name: AlertWebhookCertificateNotReady,
			// cert-manager's view of the Certificate: False while issuing fails or the Secret does
			// not match the spec, Unknown before it was ever issued. Renewal can fail while it
			// stays Ready (the current certificate is still valid): that is RenewalOverdue.
			expr: `max by (namespace, name, condition) (` + certManagerNamespace(`certmanager_certificate_ready_status{name="{{certificate}}",condition=~"False|Unknown"}`) + `) == 1`,
			dur:  "15m", severity: SeverityWarning,
			summary:     "The webhooks' cert-manager Certificate is not Ready.",
			description: "cert-manager has reported the Certificate {{ $labels.name }} Ready={{ $labels.condition }} for 15 minutes. A replica starting now gets no serving certificate (and is not ready); running replicas keep theirs until it expires.",
		}, {
			name: AlertWebhookCertificateRenewalOverdue,
			// Relative to the Certificate's own renewal time (status.renewalTime: renewBefore
			// ahead of expiry), so it fires an hour after a renewal should have happened, whatever
			// the lifetime. A fixed threshold would wait weeks with the default renewBefore (30
			// days) and fire forever for certificates shorter than it. 0 means never issued.
			expr: `time() - max by (namespace, name) (` + certManagerNamespace(`certmanager_certificate_renewal_timestamp_seconds{name="{{certificate}}"} > 0`) + `) > 3600`,
			dur:  "15m", severity: SeverityWarning,
			summary:     "cert-manager has not renewed the webhooks' serving certificate.",
			description: "The Certificate {{ $labels.name }} was due for renewal {{ $value | humanizeDuration }} ago and has not been renewed. Nothing fails until it expires; WidgetWebhookCertificateExpiresSoon fires before that.",
		}, {
			name: AlertWebhookCertificateStale,
			// cert-manager renewed the Secret but the replica still presents an older certificate
			// (compared within a namespace: the Certificate's is the release's):
			// the kubelet refreshes the mounted Secret within a minute or two and certwatcher reloads
			// it, so 15 minutes means the reload failed. A renewal held back on purpose (the
			// caBundles do not trust its CA yet) has its own alert and is left out here.
			expr: `max by (namespace, job, instance) (widget_webhook_certificate_expiry_timestamp_seconds{job="{{job}}"})
  < on (namespace) group_left ()
max by (namespace) (` + certManagerNamespace(`certmanager_certificate_expiration_timestamp_seconds{name="{{certificate}}"}`) + `)
  unless on (namespace, job, instance)
max by (namespace, job, instance) (widget_webhook_certificate_renewal_held{job="{{job}}"}) == 1`,
			dur: "15m", severity: SeverityWarning,
			summary:     "A replica serves an older webhook certificate than its Secret.",
			description: "Replica {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) still presents a serving certificate that expires {{ $value | humanizeTimestamp }}, older than the one cert-manager has issued for the Certificate {{certificate}}, for 15 minutes. It has not reloaded: when its certificate expires, it fails every webhook call it gets.",
		}, {
			// Last resort, relative to the certificate's own lifetime (NotAfter - NotBefore of the
			// one the replica presents), capped at the old fixed thresholds: a fixed threshold
			// fires forever for a certificate shorter than it. cert-manager renews with a third of
			// the lifetime left by default, so a fifth left means renewal or reload failed long
			// ago (RenewalOverdue and Stale say which).
			name: AlertWebhookCertificateExpiresSoon,
			expr: `widget_webhook_certificate_expiry_timestamp_seconds{job="{{job}}"} - time()
  <
clamp_max(0.2 * (widget_webhook_certificate_expiry_timestamp_seconds{job="{{job}}"} - widget_webhook_certificate_not_before_timestamp_seconds{job="{{job}}"}), 7 * 86400)`,
			dur:      "15m",
			severity: SeverityWarning,
			summary:  "The webhook serving certificate is near the end of its lifetime.",
			description: "The serving certificate loaded by {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) expires in {{ $value | humanizeDuration }}, with less than a fifth of its lifetime (at most 7 days) left. " +
				"cert-manager renews with a third of the lifetime left by default, so renewal or the reload has failed.",
		}, {
			name: AlertWebhookCertificateExpiresSoon,
			expr: `widget_webhook_certificate_expiry_timestamp_seconds{job="{{job}}"} - time()
  <
clamp_max(0.1 * (widget_webhook_certificate_expiry_timestamp_seconds{job="{{job}}"} - widget_webhook_certificate_not_before_timestamp_seconds{job="{{job}}"}), 86400)`,
			dur:         "5m",
			severity:    SeverityCritical,
			summary:     "The webhook serving certificate is about to expire.",
			description: "The serving certificate loaded by {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) expires in {{ $value | humanizeDuration }}, with less than a tenth of its lifetime (at most a day) left. When it does, the apiserver refuses the TLS handshake and every converted Widget request and every Widget write fails.",
		}, {
			// A renewal under a new CA waits for the caBundles to trust it: a minute normally
			// (the leader's next plan, cainjector's injection). Half an hour means the bundle
			// Secret or cainjector is stuck; nothing fails until the current certificate expires.
			name:     AlertWebhookCertificateRenewalHeld,
			expr:     `max by (namespace, job, instance) (widget_webhook_certificate_renewal_held{job="{{job}}"}) == 1`,
			dur:      "30m",
			severity: SeverityWarning,
			summary:  "A renewed webhook certificate is held back: the caBundles do not trust its CA.",
			description: "Replica {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) has had a renewed serving certificate on disk for 30 minutes that a caBundle the apiserver uses does not trust, and keeps serving its current one. " +
				"The CA bundle Secret lacks the new CA (no leader, or it cannot read or write the Secrets) or cainjector has not injected it. Nothing fails until the current certificate expires.",
		}},
	}, {
		name: "widget-operator.api-upgrade",
		alerts: []alert{{
			name:        AlertStorageMigrationFailed,
			expr:        `max by (namespace, job, crd) (widget_migration_failed{job="{{job}}"}) == 1`,
			severity:    SeverityWarning,
			summary:     "The last storage migration ended in an error.",
			description: "The last storage migration of {{ $labels.crd }} (reported by job {{ $labels.job }}, namespace {{ $labels.namespace }}) ended in an error; storedVersions cannot be trimmed and the next stage (unserve) is refused until it completes.",
		}, {
			name: AlertStorageMigrationStalled,
			expr: `(time() - max by (namespace, job, crd) (widget_migration_last_progress_timestamp_seconds{job="{{job}}"})) > 900
  and on (namespace, job, crd)
max by (namespace, job, crd) (widget_migration_in_progress{job="{{job}}"}) == 1`,
			dur: "5m", severity: SeverityWarning,
			summary:     "A storage migration makes no progress.",
			description: "The storage migration of {{ $labels.crd }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) is in progress but has rewritten no object for {{ $value | humanizeDuration }}.",
		}, {
			name: AlertStoredVersionsNotTrimmed,
			expr: `count by (namespace, job, crd) (max by (namespace, job, crd, version) (widget_crd_stored_versions{job="{{job}}"})) > 1
  unless on (namespace, job, crd)
max by (namespace, job, crd) (widget_migration_in_progress{job="{{job}}"}) == 1`,
			dur: "24h", severity: SeverityWarning,
			summary:     "A CRD keeps objects in more than one stored version.",
			description: "{{ $labels.crd }} has had {{ $value }} versions in status.storedVersions for a day with no migration running. Run the migrate stage (or widgetctl migrate) so the old version can stop being served.",
		}, {
			name: AlertDeprecatedVersionInUse,
			// After the storage flip nothing of ours uses v1alpha1 (the controller follows the
			// storage version), so remaining requests come from other clients.
			// Dry runs (dry_run not empty) are left out: the chart's hooks and helm test probe with
			// them, and they store nothing. The window (10m) is shorter than `for` (15m): the
			// controller's own v1alpha1 requests from before the flip then leave the window
			// before the alert fires, instead of keeping it firing for the hour after every flip.
			expr: `sum by (group, version, resource) (rate(apiserver_request_total{group="widgetry.io",version="v1alpha1",resource="widgets",dry_run=""}[10m])) > 0
  and on (version)
max by (version) (widget_crd_version_info{job="{{job}}",crd="{{crd}}",version="v1alpha1",served="true",storage="false"})`,
			dur: "15m", severity: SeverityInfo,
			summary:     "Clients still use the deprecated Widget version.",
			description: "The apiserver served {{ $value | humanize }} requests/s for {{ $labels.resource }}.{{ $labels.group }}/{{ $labels.version }} over the last 10 minutes, for 15 minutes now. These clients break at the unserve stage; find and move them to v1 first.",
		}, {
			name: AlertCRDBreakGlass,
			expr: `max by (namespace, job, crd) (widget_crd_break_glass{job="{{job}}"}) == 1`,
			dur:  "1m", severity: SeverityWarning,
			summary:     "The Widget CRD is changed under break-glass.",
			description: "{{ $labels.crd }} carries the widgetry.io/break-glass annotation: changes to it pass the stage guard (the ValidatingAdmissionPolicy) unchecked. Finish the procedure and remove the annotation.",
		}, {
			name: AlertControllerMemoryNearLimit,
			// The Go runtime's heap goal (next_gc) is GOGC's, 1.5x the live heap at the chart's
			// --gogc=50, until it meets the Go memory limit (GOMEMLIMIT, 90% of the container's
			// limit); from then on the collector works to stay under the limit. For the
			// controller that means its caches (four small objects per Widget) fill two thirds of
			// the limit: collections cost more and more CPU as the fleet grows, and lists that
			// hold a second copy (a new leader's, a watch that expired) can be OOM-killed.
			// Without a memory limit go_gc_gomemlimit_bytes is MaxInt64 and this never fires.
			expr: `max by (namespace, job, instance) (go_memstats_next_gc_bytes{job="{{job}}",process="controller"})
  / on (namespace, job, instance)
max by (namespace, job, instance) (go_gc_gomemlimit_bytes{job="{{job}}",process="controller"})
  > 0.9`,
			dur: "30m", severity: SeverityWarning,
			summary: "The Widget controller's caches approach its memory limit.",
			description: "The heap goal of the controller process on replica {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) has been {{ $value | humanizePercentage }} of its Go memory limit for 30 minutes: the collector runs to stay under the limit instead of at its own pace. " +
				"The fleet has outgrown controllerResources.limits.memory; the next relist (a new leader, a watch that expired) may be OOM-killed.",
		}, {
			name: AlertControllerNotRunning,
			// Every replica sets the controller up again after a failure, with backoff; the
			// webhooks keep serving meanwhile, so only this (and the missing leader) shows it.
			expr: `max by (namespace, job) (widget_controller_running{job="{{job}}"}) == 0
  and on (namespace, job)
sum by (namespace, job) (increase(widget_controller_failures_total{job="{{job}}"}[10m])) > 0`,
			dur: "5m", severity: SeverityCritical,
			summary:     "No replica can run the Widget controller.",
			description: "The Widget controller of job {{ $labels.job }} in namespace {{ $labels.namespace }} keeps failing on every replica (widget_controller_failures_total by stage: setup means the CRD is missing, its storage version unknown or RBAC denied; run means it stopped, e.g. caches that never sync). The webhooks still serve, but no Widget is reconciled and no finalizer removed, so deletions hang.",
		}, {
			name: AlertWebhookBudgetRefusals,
			// Each refusal is a failed Widget read or write (both webhooks fail closed), so a
			// few in a row matter; a single one during a burst of LISTs does not page.
			expr: `sum by (namespace, job) (increase(widget_webhook_budget_refusals_total{job="{{job}}"}[5m])) > 0`,
			dur:  "5m", severity: SeverityWarning,
			summary:     "The webhooks refuse requests to stay inside their memory budget.",
			description: "Replicas of job {{ $labels.job }} in namespace {{ $labels.namespace }} refused {{ $value | humanize }} webhook requests in 5 minutes with HTTP 503 because the requests in flight held their whole memory budget (widget_webhook_inflight_bytes at widget_webhook_inflight_budget_bytes). The refused Widget reads and writes failed: large LISTs through the other version, or a client flooding the webhooks.",
		}, {
			name: AlertConversionDegraded,
			// Each degraded conversion is a read that succeeded with less than the object
			// holds (its v1-only fields not restored): nothing fails, so nothing else shows
			// it, and a write of the object through v1 would store the loss. Even one matters.
			expr:     `sum by (namespace, job, reason) (increase(widget_conversion_degraded_total{job="{{job}}"}[10m])) > 0`,
			severity: SeverityWarning,
			summary:  "Widgets were converted without data they hold.",
			description: "Replicas of job {{ $labels.job }} in namespace {{ $labels.namespace }} converted {{ $value | humanize }} Widgets without data they hold ({{ $labels.reason }}: a conversion-data annotation that does not parse, written past admission) in the last 10 minutes, instead of failing every LIST and watch that holds them. " +
				"Each was returned marked with the annotation widgetry.io/conversion-degraded; its spec.paused and exact spec.timeout were not restored.",
		}, {
			name: AlertControllerPaused,
			// The uninstall hook pauses the controller for seconds; a marker that stays means a
			// failed or interrupted uninstall, and no Widget is reconciled meanwhile.
			expr: `max by (namespace, job) (widget_controller_paused{job="{{job}}"}) == 1`,
			dur:  "15m", severity: SeverityWarning,
			summary:     "The Widget controller is paused.",
			description: "The pause marker (ConfigMap widget-operator-paused in namespace {{ $labels.namespace }}) has stopped the controller for 15 minutes: no Widget gets its Deployment, Service, finalizer or status updated. It is left by a failed or interrupted helm uninstall.",
		}},
	}}
}

// certManagerNamespace gives cert-manager's series of a Certificate the Certificate's namespace
// as namespace, so that they join with the manager's (whose namespace is the release's). Scraped
// from cert-manager's own pod without honor_labels (prometheus-operator's default), the
// Certificate's namespace arrives as exported_namespace and namespace is cert-manager's.
func certManagerNamespace(selector string) string {
	return `label_replace(` + selector + `, "namespace", "$1", "exported_namespace", "(.+)")`
}

// Rules renders the alerting rules for cfg.
func Rules(cfg Config) (RuleFile, error) {
	if err := cfg.Validate(); err != nil {
		return RuleFile{}, err
	}
	tokens := strings.NewReplacer(
		"{{job}}", cfg.Job,
		"{{crd}}", WidgetCRD,
		"{{lease}}", LeaseName,
		"{{replicas}}", strconv.Itoa(cfg.ExpectedReplicas),
		"{{certificate}}", cfg.Certificate,
		"{{admission_webhooks}}", admissionWebhooks,
	)
	var f RuleFile
	for _, g := range alertGroups() {
		rg := RuleGroup{Name: g.name}
		for _, a := range g.alerts {
			rg.Rules = append(rg.Rules, Rule{
				Alert:  a.name,
				Expr:   tokens.Replace(a.expr),
				For:    a.dur,
				Labels: labels(a),
				Annotations: map[string]string{
					"summary":     a.summary,
					"description": tokens.Replace(a.description),
					"runbook_url": cfg.RunbookURL(a.name),
				},
			})
		}
		f.Groups = append(f.Groups, rg)
	}
	return f, nil
}

func labels(a alert) map[string]string {
	l := map[string]string{"severity": a.severity}
	if a.source != "" {
		l["source"] = a.source
	}
	if a.symptom != "" {
		l["symptom"] = a.symptom
	}
	return l
}

// RulesYAML renders the rules file for cfg.
func RulesYAML(cfg Config) ([]byte, error) {
	f, err := Rules(cfg)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Generated by go run ./internal/monitoring/gen from internal/monitoring/alerts.go. DO NOT EDIT.\n")
	fmt.Fprintf(&b, "# job=%q, expected replicas %d, certificate %q, runbook base %s\n", cfg.Job, cfg.ExpectedReplicas, cfg.Certificate, cfg.RunbookBaseURL)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("encode rules: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode rules: %w", err)
	}
	return b.Bytes(), nil
}

// AlertNames returns every alert name once, in rules-file order.
func AlertNames() []string {
	var names []string
	seen := map[string]bool{}
	for _, g := range alertGroups() {
		for _, a := range g.alerts {
			if !seen[a.name] {
				seen[a.name] = true
				names = append(names, a.name)
			}
		}
	}
	return names
}

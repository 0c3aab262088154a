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
	AlertConversionWebhookErrors       = "WidgetConversionWebhookErrors"
	AlertConversionWebhookSlow         = "WidgetConversionWebhookSlow"
	AlertWebhookDown                   = "WidgetWebhookDown"
	AlertOperatorNoLeader              = "WidgetOperatorNoLeader"
	AlertOperatorDegraded              = "WidgetOperatorDegraded"
	AlertReconcileErrors               = "WidgetReconcileErrors"
	AlertWebhookCertificateExpiresSoon = "WidgetWebhookCertificateExpiresSoon"
	AlertWebhookCertificateRenewalHeld = "WidgetWebhookCertificateRenewalHeld"
	AlertStorageMigrationFailed        = "WidgetStorageMigrationFailed"
	AlertStorageMigrationStalled       = "WidgetStorageMigrationStalled"
	AlertStoredVersionsNotTrimmed      = "WidgetStoredVersionsNotTrimmed"
	AlertDeprecatedVersionInUse        = "WidgetDeprecatedVersionInUse"
	AlertCRDBreakGlass                 = "WidgetCRDBreakGlass"
	AlertControllerPaused              = "WidgetControllerPaused"
	AlertControllerNotRunning          = "WidgetControllerNotRunning"
	AlertWebhookBudgetRefusals         = "WidgetWebhookBudgetRefusals"
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

// alert is a rule before configuration: expr holds the tokens {{job}}, {{crd}}, {{lease}} and
// {{replicas}} (never Prometheus' own {{ $labels.x }} templating, which only annotations use).
type alert struct {
	name, expr, dur, severity, summary, description string
	// source tells apart two rules of one alert that measure at different places (manager,
	// apiserver); it becomes a label so that the rules are not duplicates.
	source string
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
			expr: `(
  count by (namespace, job) (up{job="{{job}}"} == 1)
    or
  sum by (namespace, job) (up{job="{{job}}"}) * 0
) < {{replicas}}`,
			dur: "15m", severity: SeverityWarning,
			summary:     "Fewer widget-operator replicas are up than desired.",
			description: "{{ $value }} of {{replicas}} replicas of job {{ $labels.job }} in namespace {{ $labels.namespace }} are up. The webhooks and leader election have less redundancy; one more loss stops conversion.",
		}, {
			name: AlertReconcileErrors,
			expr: `sum by (namespace, job, controller) (rate(controller_runtime_reconcile_errors_total{job="{{job}}",controller="widget"}[5m]))
  /
sum by (namespace, job, controller) (rate(controller_runtime_reconcile_total{job="{{job}}",controller="widget"}[5m]))
  > 0.1`,
			dur: "15m", severity: SeverityWarning,
			summary:     "Widget reconciles fail.",
			description: "{{ $value | humanizePercentage }} of reconciles of controller {{ $labels.controller }} in job {{ $labels.job }} (namespace {{ $labels.namespace }}) ended in an error over the last 5 minutes.",
		}},
	}, {
		name: "widget-operator.certificates",
		alerts: []alert{{
			name:     AlertWebhookCertificateExpiresSoon,
			expr:     `widget_webhook_certificate_expiry_timestamp_seconds{job="{{job}}"} - time() < 7 * 86400`,
			dur:      "1h",
			severity: SeverityWarning,
			summary:  "The webhook serving certificate expires within 7 days.",
			description: "The serving certificate loaded by {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) expires in {{ $value | humanizeDuration }}. " +
				"cert-manager renews a third of the lifetime before expiry, so renewal or the reload has failed.",
		}, {
			name:        AlertWebhookCertificateExpiresSoon,
			expr:        `widget_webhook_certificate_expiry_timestamp_seconds{job="{{job}}"} - time() < 86400`,
			dur:         "10m",
			severity:    SeverityCritical,
			summary:     "The webhook serving certificate expires within a day.",
			description: "The serving certificate loaded by {{ $labels.instance }} (job {{ $labels.job }}, namespace {{ $labels.namespace }}) expires in {{ $value | humanizeDuration }}. When it does, the apiserver refuses the TLS handshake and every converted Widget request fails.",
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
			expr: `sum by (group, version, resource) (rate(apiserver_request_total{group="widgetry.io",version="v1alpha1",resource="widgets"}[1h])) > 0
  and on (version)
max by (version) (widget_crd_version_info{job="{{job}}",crd="{{crd}}",version="v1alpha1",served="true",storage="false"})`,
			dur: "15m", severity: SeverityInfo,
			summary:     "Clients still use the deprecated Widget version.",
			description: "The apiserver served {{ $value | humanize }} requests/s for {{ $labels.resource }}.{{ $labels.group }}/{{ $labels.version }} over the last hour. These clients break at the unserve stage; find and move them to v1 first.",
		}, {
			name: AlertCRDBreakGlass,
			expr: `max by (namespace, job, crd) (widget_crd_break_glass{job="{{job}}"}) == 1`,
			dur:  "1m", severity: SeverityWarning,
			summary:     "The Widget CRD is changed under break-glass.",
			description: "{{ $labels.crd }} carries the widgetry.io/break-glass annotation: changes to it pass the stage guard (the ValidatingAdmissionPolicy) unchecked. Finish the procedure and remove the annotation.",
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
	fmt.Fprintf(&b, "# job=%q, expected replicas %d, runbook base %s\n", cfg.Job, cfg.ExpectedReplicas, cfg.RunbookBaseURL)
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

package monitoring

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Defaults of Config; the committed files are rendered with them.
const (
	// DefaultJob is the Prometheus job label of the manager's metrics endpoint (the chart's
	// ServiceMonitor sets jobLabel to it).
	DefaultJob = "widget-operator"
	// DefaultRunbookBaseURL is the runbook base of the committed rules. It is a literal the
	// chart replaces with its monitoring.runbookBaseURL value, so keep it unique in the file.
	DefaultRunbookBaseURL = "https://github.com/widgetry/widget-operator/blob/main/runbooks"
	// DefaultExpectedReplicas is the manager replica count WidgetOperatorDegraded expects (the
	// chart's default replicaCount).
	DefaultExpectedReplicas = 2
	// WidgetCRD is the CRD the API upgrade alerts and panels watch.
	WidgetCRD = "widgets.widgetry.io"
	// LeaseName is the manager's leader election lease (leader_election_master_status' name).
	LeaseName = "widget-operator.widgetry.io"
	// DefaultCertificate is the cert-manager Certificate of the webhooks' serving certificate
	// for the default release name (the chart names it <fullname>-serving).
	DefaultCertificate = "widget-operator-serving"
	// MutatingWebhookName and ValidatingWebhookName are the webhooks of the chart's
	// Mutating- and ValidatingWebhookConfiguration: the name label of the apiserver's
	// apiserver_admission_webhook_* metrics. The mutating one is failurePolicy Fail, the
	// validating one Ignore (the CRD's CEL rules refuse what it would).
	MutatingWebhookName   = "mutate.widgets.widgetry.io"
	ValidatingWebhookName = "validate.widgets.widgetry.io"
	// ManagerContainers are the containers of the two planes' pods (webhook and controller;
	// manager was the single-Deployment layout's webhook container): the container label of
	// the kubelet's cAdvisor metrics.
	ManagerContainers = "webhook|controller|manager"
)

// admissionWebhooks is a PromQL regular expression, as the body of a double-quoted string,
// matching exactly the two admission webhooks' names.
var admissionWebhooks = strings.ReplaceAll(regexp.QuoteMeta(MutatingWebhookName)+"|"+regexp.QuoteMeta(ValidatingWebhookName), `\`, `\\`)

// Config parameterises the rules (dashboards take job and namespace as Grafana variables).
type Config struct {
	// Job is the manager's Prometheus job label value.
	Job string
	// RunbookBaseURL prefixes every runbook_url: <base>/alerts/<AlertName>.md.
	RunbookBaseURL string
	// ExpectedReplicas is how many manager replicas should be up. There is no
	// kube-state-metrics in this project's tests, and `up` has no series for a replica that
	// was never scheduled, so the desired count comes from the deployment's configuration.
	ExpectedReplicas int
	// Certificate is the cert-manager Certificate of the serving certificate (the name label of
	// cert-manager's certmanager_certificate_* metrics); the chart derives it from the release.
	Certificate string
}

// DefaultConfig returns the configuration of the committed rules file.
func DefaultConfig() Config {
	return Config{Job: DefaultJob, RunbookBaseURL: DefaultRunbookBaseURL, ExpectedReplicas: DefaultExpectedReplicas, Certificate: DefaultCertificate}
}

// Validate reports a configuration that would render broken rules.
func (c Config) Validate() error {
	if c.Job == "" || strings.ContainsAny(c.Job, "\"\\\n") {
		return fmt.Errorf("job %q: want a non-empty label value without quotes, backslashes or newlines", c.Job)
	}
	u, err := url.Parse(c.RunbookBaseURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Errorf("runbook base URL %q: want an absolute URL such as %s", c.RunbookBaseURL, DefaultRunbookBaseURL)
	}
	if c.ExpectedReplicas < 1 {
		return fmt.Errorf("expected replicas %d: want at least 1", c.ExpectedReplicas)
	}
	if c.Certificate == "" || strings.ContainsAny(c.Certificate, "\"\\\n") {
		return fmt.Errorf("certificate %q: want a non-empty Certificate name without quotes, backslashes or newlines", c.Certificate)
	}
	return nil
}

// RunbookURL is the runbook page of an alert: <base>/alerts/<AlertName>.md, the layout of
// runbooks/ in this repository (runbooks/README.md links every page).
func (c Config) RunbookURL(alert string) string {
	return strings.TrimSuffix(c.RunbookBaseURL, "/") + "/alerts/" + alert + ".md"
}

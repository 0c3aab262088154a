// Package monitoring generates what Prometheus and Grafana load for widget-operator: the alerting
// rules (dashboards/prometheus/widget-operator.rules.yaml) and the Grafana dashboards
// (dashboards/*.json, built with grafana-foundation-sdk). Go is the source of truth so that the
// job label, the expected replica count and the runbook base URL are parameters rather than
// copies, and so that tests can check every expression, metric name and runbook link.
//
// Regenerate with: go run ./internal/monitoring/gen
package monitoring

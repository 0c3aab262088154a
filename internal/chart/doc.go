// Package chart generates the files of the Helm chart charts/widget-operator that derive from
// Go sources — the Widget CRD's versions and per-stage flags (from internal/crd), the Grafana
// dashboards (from internal/monitoring) and the values table of the chart README (from the
// comments in values.yaml) — and its tests render the chart with the pinned Helm CLIs and
// check the output: every stage's CRD against crd.ApplyStageFlags, every value that changes
// the output, helm lint, ct lint and kubeconform. `make generate` runs ./internal/chart/gen.
package chart

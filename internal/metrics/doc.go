// Package metrics holds the manager's own widget_* metrics that describe its environment rather
// than its work: the CRD's versions and storedVersions, the expiry of the serving certificate the
// webhook server has loaded, and the build. The manager registers them with Register; the metric
// catalogue is runbooks/README.md.
//
// Values are read at scrape time (Prometheus collectors), so a metric is never staler than the
// scrape and there is no extra goroutine or watch to keep in sync.
package metrics

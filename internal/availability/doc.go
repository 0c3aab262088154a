// Package availability holds the production proof of the operator as the chart installs it
// on a real node: Prometheus monitoring through the chart's RBAC, and zero failed API
// requests across a rollout restart, a helm upgrade of the pod template, a forced certificate
// renewal and the loss of the leader, while a client drives Widgets through v1alpha1 so that
// every request crosses the webhook Service.
package availability

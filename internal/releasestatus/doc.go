// Package releasestatus gathers, for widgetctl status, one view of a widget-operator
// release: the Helm release as Helm recorded it (read with Helm's own storage code, so a
// release written by Helm 3 or Helm 4 reads the same), the stage the cluster is actually at,
// cert-manager's Certificates, the caBundles against the certificate each replica serves, the
// replicas and the leader, the migration's progress, the pause marker and the conversion path.
// Everything is read through the apiserver (its pod and service proxies included), so a
// laptop with a kubeconfig sees what a pod in the cluster sees.
package releasestatus

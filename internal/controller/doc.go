// Package controller reconciles Widgets: each owns a Deployment and a Service (owner
// references, so the garbage collector cascades deletion) and has a catalog entry in the
// operator's namespace, guarded by the widgetry.io/catalog-cleanup finalizer because no owner
// reference can cross namespaces.
//
// The logic works on the v1 hub, but the watches are on the CRD's storage version (seed 000):
// reading the storage version never calls the conversion webhook, and at stage initial v1 is
// not even served. Objects are converted in-process with internal/conversion.
package controller

// Package controller reconciles Widgets: each owns a Deployment and a Service (owner
// references, so the garbage collector cascades deletion) and has a catalog entry in the
// operator's namespace, guarded by the widgetry.io/catalog-cleanup finalizer because no owner
// reference can cross namespaces.
//
// The logic works on the v1 hub, but the watches are on the CRD's storage version: at stage
// initial v1 is not even served, and reading through the storage version calls the
// conversion webhook (which this same process serves) only for objects not yet rewritten in
// it, between flip-storage and the end of the migration. Objects are converted in-process
// with internal/conversion. When the storage version flips, the Widget watch follows it
// inside the process (followStorageVersion).
//
// The finalizer:
//   - is added before the catalog entry is written, so no entry can outlive its Widget;
//   - is removed only once the entry is gone, confirmed by a read that bypasses the cache;
//   - keeps a deleted Widget Terminating while the operator is down; the deletion finishes
//     when the operator comes back;
//   - would keep every Widget, and every namespace holding one, Terminating forever once the
//     operator is uninstalled. So the chart's pre-delete hook first pauses reconciliation
//     (PausedConfigMap; the controller would otherwise add the finalizer straight back), then
//     removes the finalizer from every Widget (internal/finalizers) and deletes the catalog
//     (DeleteCatalog).
//
// Conditions (Ready, Progressing) and their reasons are part of the API, in api/v1.
package controller

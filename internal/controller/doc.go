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
// Children are never taken over (ownership.go): a Deployment or Service of the Widget's name
// that this Widget does not control — someone else's, or its own orphaned by an orphan
// deletion — is left untouched, and the Widget reports Ready=False, reason NameConflict, with
// a Warning event, until that object is gone. A child that does not exist is created (a
// Create fails if one appeared meanwhile); one it controls is applied with the resourceVersion
// it was read at, so a write based on a stale read conflicts and is retried instead of putting
// back an owner reference the garbage collector has just removed.
//
// A child, and the catalog entry, is written only when it differs from what the controller
// would apply (current.go): the controller reads it first, and the hash of the applied object
// (the widgetry.io/applied-hash annotation) tells a field it stopped applying from one it still
// applies. A reconcile that changes nothing (the Deployment's status moved, the controller
// restarted) writes nothing but the Widget's status, if that moved.
//
// While the pause marker exists the controller writes nothing but the Paused condition on
// each Widget it sees, and widget_controller_paused is 1 (the WidgetControllerPaused alert).
//
// Conditions (Ready, Progressing, Paused) and their reasons are part of the API, in api/v1.
package controller

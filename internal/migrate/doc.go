// Package migrate re-encodes every stored object of a CustomResourceDefinition in its
// storage version and then trims status.storedVersions to that version: the step between
// flipping a CRD's storage version and no longer serving the old one (what the migrate stage
// of the staged upgrade runs; the stages are described in the documentation of package
// internal/crd). It itself knows nothing about Widgets or stages; it works for any CRD and
// version pair.
//
// Changing `storage: true` changes how new writes are encoded, not what etcd already holds:
// each object stays in the old encoding until it is written again. Migrate writes each one
// again - an empty merge patch carrying the object's resourceVersion, which the apiserver
// decodes, converts, encodes in the storage version and writes only if the bytes changed -
// and only then may storedVersions forget the old version, which in turn is what allows the
// old version to stop being served and, later, to be removed.
//
// What makes it safe:
//   - Paged metadata-only LIST (500 per page, continue tokens; a 410 Gone restarts the LIST
//     from scratch, skipping objects already handed out), bounded concurrency (8), client QPS
//     and burst, client-go's retries of 429 with Retry-After.
//   - Writes carry the listed resourceVersion: a Conflict means someone else wrote the object
//     since (which re-encoded it), a NotFound that it is gone; both are counted, never retried.
//   - Writes go through the status subresource when the CRD has one: the apiserver
//     re-encodes the object in the storage version all the same, but admission webhooks
//     registered for the main resource do not see the write, so they can neither change the
//     object nor block its rewrite (a webhook whose rules are stricter than what is stored,
//     or that was absent when an object was written, would otherwise fail the migration).
//     A CRD without one is rewritten through the main resource.
//   - Progress is checkpointed, in order of pages, into one ConfigMap per CRD
//     (ProgressObjectName, see progress.go for its fields and why a ConfigMap): a killed run
//     resumes from the last page all of whose objects, and all earlier pages' objects, were
//     done. The ConfigMap's resourceVersion also detects a second migrator on the same CRD.
//   - The trim (TrimStoredVersions) re-reads the CRD and refuses, changing nothing, if the
//     storage version or the generation changed, or a stored version appeared, since the
//     migration started; it writes with the resourceVersion it checked.
//   - Backends: BackendClient does the above; BackendInTree creates a Kubernetes 1.37
//     storagemigration.k8s.io/v1 StorageVersionMigration and lets kube-controller-manager
//     rewrite and trim, only waiting and verifying; BackendAuto picks in-tree only when its
//     controller is seen to pick the migration up.
//   - NewProgressCollector exports the progress objects as widget_migration_* metrics from a
//     long-running process (the manager), since the migrator itself is short-lived.
//
// DropManagedFields removes the managedFields entries of a version about to be unserved.
//
// See README.md for the tests, their sizes, and the benchmark.
package migrate

// Package conversion converts Widgets between v1alpha1 (spoke) and v1 (hub) without losing
// data, in the Cluster API style: the functions live outside the API packages, and what the
// spoke cannot hold travels in the widgetry.io/conversion-data annotation and is restored on
// the way back.
//
// The rules (DESIGN.md, seed 001 §7-8):
//   - replicas <-> size, unset stays unset, 0 stays 0;
//   - timeoutSeconds -> timeout is time.Duration.String() of the seconds; timeout ->
//     timeoutSeconds rounds up to whole seconds and keeps the exact string in the annotation,
//     restored only while it still rounds up to the current timeoutSeconds (a v1alpha1 client
//     that edited the field wins over a stale annotation);
//   - the endpoints list <-> map, the list sorted by name; a duplicate name is an error, never
//     an overwrite;
//   - paused travels in the annotation;
//   - status converts field by field, metadata passes through untouched apart from the
//     annotation, which is removed once it holds nothing.
//
// The spec-level functions are shared by the typed converters (controller, tests, the stock
// controller-runtime handler) and by the webhook's fast wire path, so there is one set of rules.
package conversion

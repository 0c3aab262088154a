// Package conversion converts Widgets between v1alpha1 and v1 without losing data, in the
// Cluster API style: the functions live outside the API packages, v1 is the hub and
// v1alpha1 a spoke, and what the spoke cannot hold travels in an annotation on the spoke and
// is restored on the way back.
//
// # Hub and spoke
//
// Every conversion goes between the hub and a spoke (ConvertWidgetToHub,
// ConvertWidgetFromHub); an object already in the desired version is not converted at all.
// The controller works on the hub whatever the storage version, and a version added later
// would convert only to and from v1, not to every other version.
//
// # Lossless round trip
//
// Both round trips give back exactly what went in: spoke -> hub -> spoke and hub -> spoke ->
// hub, down to unset versus zero and nil versus empty. That holds for every object the CRD
// schemas accept (the domain of conversiontest.NewFiller, which the round-trip tests draw
// from): conversion is only lossless where both versions can hold the value.
//
// A v1 value v1alpha1 cannot express is kept, on the v1alpha1 object, in the annotation
// widgetry.io/conversion-data (DataAnnotation), as the JSON of RestoreData. The annotation:
//   - is written on the spoke only when it holds something, and removed when it no longer
//     does (an object that had no annotations gets none back, not an empty map);
//   - is removed by conversion to the hub: its content is back in the v1 fields there;
//   - must hold the JSON this package writes: anything else is an error here, never ignored,
//     since ignoring it would silently drop a paused flag. The webhook, which must not fail a
//     whole LIST for one object, converts such an object without it and marks it
//     (DegradedAnnotation, reason InvalidConversionData), so that the loss is visible.
//
// # The rules, field by field
//
//   - spec.replicas (v1alpha1) <-> spec.size (v1): the pointer is copied. Unset stays unset
//     (the default, 1, is the schema's and the defaulting webhook's business, not
//     conversion's) and an explicit 0 stays 0.
//   - spec.image is copied.
//   - spec.timeoutSeconds -> spec.timeout: the whole seconds in Go's canonical duration form,
//     time.Duration.String() (90 -> "1m30s"). spec.timeout -> spec.timeoutSeconds: the
//     duration rounded up to whole seconds ("1.5s" -> 2); a timeout that is not a Go duration,
//     not positive, or beyond int32 seconds is an error. When the canonical form of those
//     seconds is not the very string v1 held ("1.5s", "90s"), the exact string goes into the
//     annotation, and comes back only while it still rounds up to the current timeoutSeconds:
//     a v1alpha1 client that edited the field wins over a stale annotation, and one that
//     removed it leaves the timeout unset.
//   - spec.endpoints: the v1alpha1 list <-> the v1 map keyed by name. A list that is not in
//     name order keeps its order on the hub, in the annotation widgetry.io/v1alpha1-endpoint-order
//     (EndpointOrderAnnotation: the names joined by commas), and comes back in it; a list in
//     name order, or a map written through v1, comes back sorted by name. An order annotation
//     that no longer fits the map (a v1 client changed it) orders what it names, the rest
//     sorted after, and is kept verbatim in the spoke's conversion data while the list follows
//     it, so hub -> spoke -> hub gives it back exactly. A duplicate name in the list is an
//     error, never an overwrite that would silently drop one endpoint. No list stays no map,
//     an empty list an empty map, and back.
//   - spec.paused exists only in v1: from the hub, true is recorded in the annotation; to the
//     hub, paused is what the annotation says (false without one).
//   - status has the same shape in both versions and is copied field by field, conditions
//     deep-copied with nil and empty kept apart.
//   - metadata passes through untouched apart from the annotation above; kind is kept (an
//     empty kind, as on objects built in Go, becomes Widget) and apiVersion is the target's.
//
// Errors name the object (namespace/name), so one bad Widget in a LIST of thousands can be
// found.
//
// The spec-level functions (SpecToHub, SpecFromHub, RestoreData) are shared by the typed
// converters (the controller, the admission webhooks, the upgrade engine, tests; they fit
// controller-runtime's conversion.NewSpokeConverter) and by the conversion webhook's fast path
// over raw JSON (internal/webhook), so there is one set of rules.
package conversion

// Package webhook holds the HTTP handlers the manager serves on its one HTTPS webhook server:
// CRD conversion (ConvertPath, ConversionHandler), defaulting (MutatePath, Defaulter) and
// validation (ValidatePath, Validator) of Widgets.
//
// # The admission chain
//
// For a create or update of a Widget the apiserver runs every mutating admission webhook,
// then applies the CRD schema's defaults to what they changed, then every validating
// admission webhook; the chart registers both of ours with matchPolicy Equivalent, so a
// request through either version reaches them, and failurePolicy Fail, so a write is refused
// rather than let through unchecked while the webhooks are down. What follows for the
// handlers:
//   - The apiserver does not guarantee an order among mutating webhooks, and another one may
//     run after ours. The Defaulter therefore only adds fields that are missing, as JSON patch
//     add operations, with the same defaults as the CRD schema: running it twice, or after
//     another webhook, or after the schema's own defaulting, changes nothing more.
//   - The Validator sees the object after all mutation. It refuses what the schema cannot
//     express and warns about risky but legal values, without changing anything.
//   - Both decode the object in the request's version and convert v1alpha1 to the v1 hub
//     in-process (internal/conversion), so one set of checks serves both versions without a
//     round trip through the conversion webhook, and both name fields as the request's
//     version does (spec.replicas for v1alpha1, spec.size for v1).
//
// # Conversion
//
// The conversion handler answers ConversionReviews on the raw JSON: only spec is decoded and
// converted, metadata and status pass through byte for byte (conversion.go for the review,
// conversion_object.go for one object). One object that fails to convert fails the whole
// review, since a partial answer would make the apiserver drop objects from a LIST.
package webhook

// Package webhook holds the HTTP handlers the manager serves on its one HTTPS webhook server:
// CRD conversion (ConvertPath, ConversionHandler), keeping what old clients cannot see
// (MutatePath, Defaulter) and validation (ValidatePath, Validator) of Widgets.
//
// # The admission chain
//
// For a create or update of a Widget the apiserver runs every mutating admission webhook,
// then applies the CRD schema's defaults to what they changed, then every validating
// admission webhook; the chart registers both of ours with matchPolicy Equivalent, so a
// request through either version reaches them. Their failurePolicy follows from what each
// protects: the mutating webhook's is Fail, since an update through v1alpha1 without it would
// drop what that version cannot express (so is the MutatingAdmissionPolicy's, below, that does
// its work where the cluster serves one); the validating webhook's is Ignore, since the CRD's
// CEL rules refuse everything it refuses but the normalized-name length, so while our pods are
// down a write fails open to the CRD's rules rather than fail. Their matchConditions keep
// the apiserver from calling them for what neither could change: an UPDATE that leaves the
// spec and the annotations as they were (finalizers, ownerReferences: the writes of deletion
// and garbage collection, which must not wait on our pods), and, for the mutating webhook, any
// write not made through v1alpha1. The handlers still treat such requests correctly when
// they arrive (an older chart's configurations have no conditions). What follows for the
// handlers:
//   - The CRD schema's defaults, the same in both versions, run before any webhook; the
//     mutating webhook adds none of its own. It runs on UPDATE only, and on an update through
//     v1alpha1 (requestKind) keeps what v1alpha1 cannot express from the stored object —
//     spec.paused always, the exact spec.timeout while it still rounds to the request's
//     timeoutSeconds — so a client that rebuilds the object (kubectl replace) loses nothing.
//     Its patch is idempotent: a second run, or one after another webhook, changes nothing.
//   - The Validator sees the object after all mutation. It refuses what the schema cannot
//     express, without changing anything. The warnings about risky but legal values (no tag,
//     :latest, no pods, a long timeout) are not its own: the chart's ValidatingAdmissionPolicy
//     widgets.widgetry.io-warnings (validationActions Warn) computes them in the apiserver, with
//     our pods gone too, and only for writes that change the spec. Its two refusals
//     that CEL can express are also the CRD's rules (the image reference grammar, a port
//     listed by two endpoints), which the apiserver enforces before any webhook and with our
//     pods gone; they stay here because the webhook sees what the schema does not: (1) the
//     kubelet's 255-character limit on the normalized name (docker.io/library/... added),
//     which CEL cannot compute without the normalization; (2) a legacy value the apiserver's
//     ratcheting admits silently, which the webhook admits with a warning that says so; and
//     (3) a CRD an older chart installed, without the rules. On UPDATE it
//     ratchets: only fields the request changes are checked (an unchanged legacy value, stored
//     while the webhooks were away, is admitted with a warning), and an update of an object
//     being deleted that only removes finalizers is always admitted, so it can leave. Images
//     follow the reference grammar the kubelet uses (github.com/distribution/reference).
//   - Both decode the object in the request's version and convert v1alpha1 to the v1 hub
//     in-process (internal/conversion), so one set of checks serves both versions without a
//     round trip through the conversion webhook, and both name fields as the request's
//     version does (spec.replicas for v1alpha1, spec.size for v1).
//
// # Keeping what v1alpha1 cannot express: a policy where the cluster has one
//
// Where the cluster serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (the
// chart decides at render time from the cluster's API versions; chart value
// webhook.mutation), the keeping of spec.paused and the exact spec.timeout for v1alpha1
// writers is the chart's MutatingAdmissionPolicy widgets.widgetry.io-keep-v1-fields, which the
// apiserver evaluates itself, before any webhook, with no pod of ours. It computes in CEL what
// the Defaulter computes (the conversion package's rules, on the v1alpha1 object: the
// annotation as RestoreData.Marshal writes it). Elsewhere the Defaulter alone does, as before.
//
// What stays in the webhook when the policy is there, and why: CEL has no JSON parser, so the
// policy reads the conversion-data annotation with regular expressions, and only in the form
// this operator writes ({}, {"paused":true}, {"timeout":"T"}, {"timeout":"T","paused":true},
// with T a Go duration short enough that parsing cannot overflow). An annotation, stored or
// sent, in any other form — keys in another order, spaces, JSON escapes (\u0073), unknown
// keys, "paused":false, a number of more digits than the grammar takes, a malformed value —
// is the webhook's: it parses JSON, keeps a semantically equal annotation the client sent
// verbatim, admits a write over an unreadable stored value with a warning, and refuses a
// malformed one sent. The policy's matchConditions take only the canonical form; the
// webhook's, with the policy rendered, call it when the annotation is not canonical or, after
// the policy, still not what must be stored (the apiserver had not loaded the policy yet,
// e.g. just after an upgrade, or it was deleted), so there is no window in which neither
// acts. Usually neither holds and a v1alpha1 write never waits on our pods. TestKeepingRoutesAgree
// (envtest) runs one corpus through both routes and holds them to the same stored result,
// the canonical cases with nothing listening for the webhook. One difference remains and
// stores nothing either way: a request with two endpoints of one name is refused by the
// Defaulter's conversion (duplicate endpoint name) on the webhook route and by the CRD's
// schema (listType map) on the policy route, with different messages.
//
// # Conversion
//
// The conversion handler answers ConversionReviews on the raw JSON: only spec is decoded and
// converted, metadata and status pass through byte for byte (conversion.go for the review,
// conversion_object.go for one object). One object that fails to convert fails the whole
// review, since a partial answer would make the apiserver drop objects from a LIST.
package webhook

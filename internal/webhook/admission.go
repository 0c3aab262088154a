package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
)

// Paths of the admission webhooks on the manager's webhook server (the chart's webhook
// configurations and the dashboards use them).
const (
	MutatePath   = "/mutate-widgetry-io-widget"
	ValidatePath = "/validate-widgetry-io-widget"
	ConvertPath  = "/convert"
)

// Defaults, the same as the CRD schema's, so defaulting agrees whichever runs first.
const (
	defaultSize           = int32(1)
	defaultTimeout        = "30s"
	defaultTimeoutSeconds = int32(30)
	// longTimeout is where a timeout becomes worth a warning.
	longTimeout = 5 * time.Minute
)

// admissionObject is a Widget decoded from an AdmissionReview in its request version and
// converted to the hub, which the checks work on.
type admissionObject struct {
	version string
	hub     *v1.Widget
	spoke   *v1alpha1.Widget // set for v1alpha1 requests
}

func decodeAdmissionObject(req admission.Request) (*admissionObject, error) {
	if req.Kind.Group != v1.GroupVersion.Group || req.Kind.Kind != widgetKind {
		return nil, fmt.Errorf("this webhook admits %s Widgets, not %s", v1.GroupVersion.Group, req.Kind)
	}
	switch req.Kind.Version {
	case v1.GroupVersion.Version:
		hub := &v1.Widget{}
		if err := json.Unmarshal(req.Object.Raw, hub); err != nil {
			return nil, fmt.Errorf("decode v1 Widget: %w", err)
		}
		return &admissionObject{version: req.Kind.Version, hub: hub}, nil
	case v1alpha1.GroupVersion.Version:
		spoke := &v1alpha1.Widget{}
		if err := json.Unmarshal(req.Object.Raw, spoke); err != nil {
			return nil, fmt.Errorf("decode v1alpha1 Widget: %w", err)
		}
		hub := &v1.Widget{}
		if err := conversion.ConvertWidgetToHub(context.Background(), spoke.DeepCopy(), hub); err != nil {
			return nil, err
		}
		return &admissionObject{version: req.Kind.Version, hub: hub, spoke: spoke}, nil
	}
	return nil, fmt.Errorf("widget version %q is not supported (v1alpha1, v1)", req.Kind.Version)
}

// Defaulter is the mutating webhook. It decides on the hub which fields are unset and writes
// the defaults under the request version's field names, as JSON patch operations that only
// add missing fields: running it twice, or after another mutating webhook, changes nothing
// more (the apiserver does not guarantee an order among mutating webhooks; see the package
// documentation).
type Defaulter struct{}

// Handle implements admission.Handler.
func (Defaulter) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, err := decodeAdmissionObject(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	var fields map[string]any
	if len(req.Object.Raw) > 0 {
		var raw struct {
			Spec map[string]any `json:"spec"`
		}
		if err := json.Unmarshal(req.Object.Raw, &raw); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		fields = raw.Spec
	}
	add := map[string]any{}
	sizeField, timeoutField := "size", "timeout"
	var timeoutDefault any = defaultTimeout
	if obj.version == v1alpha1.GroupVersion.Version {
		sizeField, timeoutField, timeoutDefault = "replicas", "timeoutSeconds", defaultTimeoutSeconds
	}
	if obj.hub.Spec.Size == nil {
		add[sizeField] = defaultSize
	}
	if obj.hub.Spec.Timeout == nil {
		add[timeoutField] = timeoutDefault
	}
	if len(add) == 0 {
		return admission.Allowed("")
	}
	var patches []jsonpatch.JsonPatchOperation
	if fields == nil {
		patches = append(patches, jsonpatch.JsonPatchOperation{Operation: "add", Path: "/spec", Value: add})
	} else {
		for _, name := range []string{sizeField, timeoutField} {
			if v, ok := add[name]; ok {
				patches = append(patches, jsonpatch.JsonPatchOperation{Operation: "add", Path: "/spec/" + name, Value: v})
			}
		}
	}
	return admission.Patched("defaults applied", patches...)
}

// Validator is the validating webhook: it refuses what the schema cannot express, with field
// paths in the request version's terms, and warns about risky but legal input.
type Validator struct{}

// imageReference is a container image reference: no spaces, optional registry and path,
// an optional tag, an optional sha256 digest.
var imageReference = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`)

// Handle implements admission.Handler.
func (Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, err := decodeAdmissionObject(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	errs, warnings := validateWidget(obj)
	if len(errs) > 0 {
		invalid := apierrors.NewInvalid(schema.GroupKind{Group: v1.GroupVersion.Group, Kind: widgetKind}, obj.hub.Name, errs)
		resp := admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &invalid.ErrStatus}}
		return resp.WithWarnings(warnings...)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// validateWidget checks the hub and names fields as the request version does.
func validateWidget(obj *admissionObject) (field.ErrorList, []string) {
	spec := field.NewPath("spec")
	sizePath, timeoutPath := spec.Child("size"), spec.Child("timeout")
	if obj.spoke != nil {
		sizePath, timeoutPath = spec.Child("replicas"), spec.Child("timeoutSeconds")
	}
	w := obj.hub
	var errs field.ErrorList
	var warnings []string

	image := w.Spec.Image
	switch {
	case image == "":
		errs = append(errs, field.Required(spec.Child("image"), "set the container image, e.g. registry.example.com/team/server:v1.2.3"))
	case !imageReference.MatchString(image):
		errs = append(errs, field.Invalid(spec.Child("image"), image, "not a container image reference (lowercase repository, optional :tag, optional @sha256:digest)"))
	default:
		if tag := imageTag(image); tag == "" && !strings.Contains(image, "@") {
			warnings = append(warnings, fmt.Sprintf("%s: image %q has no tag and resolves to :latest; pin a tag or digest so rollouts are reproducible", spec.Child("image"), image))
		} else if tag == "latest" {
			warnings = append(warnings, fmt.Sprintf("%s: image %q uses the :latest tag; pin a tag or digest so rollouts are reproducible", spec.Child("image"), image))
		}
	}
	if w.Spec.Size != nil && *w.Spec.Size == 0 {
		warnings = append(warnings, fmt.Sprintf("%s is 0: the Widget runs no pods and its Service has no endpoints", sizePath))
	}
	if w.Spec.Timeout != nil {
		d, err := time.ParseDuration(*w.Spec.Timeout)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(timeoutPath, *w.Spec.Timeout, "not a Go duration such as 30s or 1m30s"))
		case d > longTimeout:
			warnings = append(warnings, fmt.Sprintf("%s is %s, over %s: slow requests will hold connections that long", timeoutPath, *w.Spec.Timeout, longTimeout))
		}
	}
	return errs, warnings
}

// imageTag returns the tag of an image reference ("" when there is none).
func imageTag(image string) string {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	last := name[strings.LastIndex(name, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return last[i+1:]
	}
	return ""
}
